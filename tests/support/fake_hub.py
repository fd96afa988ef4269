"""A local stand-in for the Hugging Face Hub's HTTP API, for download and cache tests.

It answers the routes huggingface_hub and flint use: repo info (/api/models/<id>/revision/<rev>),
the tree listing, and /<id>/resolve/<rev>/<path> (LFS files redirect to /cdn/<sha256>, plain files
are served directly with their git blob sha1 as ETag). Faults can be injected per blob: a dropped
connection after N bytes, or a corrupted body.
"""

from __future__ import annotations

import hashlib
import json
import threading
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LFS_SUFFIXES = (".safetensors", ".gguf", ".bin")


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass
class Repo:
    commits: dict[str, dict[str, bytes]] = field(default_factory=dict)  # commit -> path -> bytes
    refs: dict[str, str] = field(default_factory=dict)  # branch/tag -> commit
    private_token: str | None = None

    def add_commit(self, files: dict[str, bytes], ref: str = "main", commit: str | None = None) -> str:
        if commit is None:
            h = hashlib.sha1()
            for p in sorted(files):
                h.update(p.encode() + b"\0" + files[p])
            h.update(str(len(self.commits)).encode())
            commit = h.hexdigest()
        self.commits[commit] = dict(files)
        self.refs[ref] = commit
        return commit


class FakeHub:
    def __init__(self) -> None:
        self.repos: dict[str, Repo] = {}
        self.drop_after: dict[str, int] = {}  # sha256 -> bytes sent before the first reply is cut
        self.corrupt: set[str] = set()  # sha256 of blobs served with a flipped byte
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self.blobs: dict[str, bytes] = {}  # sha256 -> contents, filled when /resolve redirects
        self._lock = threading.Lock()
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # keep pytest output clean
                pass

            def do_HEAD(self):
                hub._handle(self, head=True)

            def do_GET(self):
                hub._handle(self, head=False)

        # The Hub and its CDN are separate origins, as on huggingface.co: clients must not follow
        # the LFS redirect for metadata, and must not send the token to the CDN.
        self.servers = [ThreadingHTTPServer(("127.0.0.1", 0), Handler) for _ in range(2)]
        for s in self.servers:
            s.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.servers[0].server_address[1]}"
        self.cdn_url = f"http://127.0.0.1:{self.servers[1].server_address[1]}"
        self.threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in self.servers]

    def __enter__(self) -> "FakeHub":
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        for s in self.servers:
            s.shutdown()
            s.server_close()

    def repo(self, repo_id: str) -> Repo:
        return self.repos.setdefault(repo_id, Repo())

    # ---- request handling ----
    def _reply(self, h, status, body=b"", headers=None, head=False):
        h.send_response(status)
        headers = dict(headers or {})
        headers.setdefault("Content-Length", str(len(body)))
        for k, v in headers.items():
            h.send_header(k, v)
        h.end_headers()
        if not head and body:
            h.wfile.write(body)

    def _error(self, h, status, code, head, extra=None):
        body = json.dumps({"error": code}).encode()
        headers = {"X-Error-Code": code, "Content-Type": "application/json"}
        headers.update(extra or {})
        self._reply(h, status, body, headers, head)

    def _authorized(self, h, repo: Repo) -> bool:
        if repo.private_token is None:
            return True
        return h.headers.get("Authorization", "") == f"Bearer {repo.private_token}"

    def _resolve_rev(self, repo: Repo, rev: str) -> str | None:
        if rev in repo.commits:
            return rev
        return repo.refs.get(rev)

    def _handle(self, h, head):
        parsed = urllib.parse.urlsplit(h.path)
        path = urllib.parse.unquote(parsed.path)
        with self._lock:
            self.requests.append((h.command, path, {k.lower(): v for k, v in h.headers.items()}))
        parts = path.strip("/").split("/")
        if parts[0] == "cdn" and len(parts) == 2:
            return self._serve_blob(h, parts[1], head)
        if parts[:2] == ["api", "models"] and len(parts) >= 6 and parts[4] in ("revision", "tree"):
            repo_id = f"{parts[2]}/{parts[3]}"
            return self._api(h, repo_id, parts[4], parts[5], head)
        if len(parts) >= 5 and parts[2] == "resolve":
            repo_id = f"{parts[0]}/{parts[1]}"
            return self._resolve(h, repo_id, parts[3], "/".join(parts[4:]), head)
        self._error(h, 404, "NotFound", head)

    def _api(self, h, repo_id, kind, rev, head):
        repo = self.repos.get(repo_id)
        if repo is None or not self._authorized(h, repo):
            return self._error(h, 401 if repo is not None else 404, "RepoNotFound", head)
        commit = self._resolve_rev(repo, rev)
        if commit is None:
            return self._error(h, 404, "RevisionNotFound", head)
        files = repo.commits[commit]
        if kind == "revision":
            body = {"id": repo_id, "sha": commit, "siblings": [{"rfilename": p} for p in sorted(files)]}
        else:
            body = []
            for p in sorted(files):
                data = files[p]
                entry = {"type": "file", "path": p, "size": len(data), "oid": git_blob_sha1(data)}
                if p.endswith(LFS_SUFFIXES):
                    entry["lfs"] = {"oid": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}
                body.append(entry)
        self._reply(h, 200, json.dumps(body).encode(), {"Content-Type": "application/json"}, head)

    def _resolve(self, h, repo_id, rev, file, head):
        repo = self.repos.get(repo_id)
        if repo is None:
            return self._error(h, 404, "RepoNotFound", head)
        if not self._authorized(h, repo):
            return self._error(h, 401, "RepoNotFound", head)
        commit = self._resolve_rev(repo, rev)
        if commit is None:
            return self._error(h, 404, "RevisionNotFound", head)
        data = repo.commits[commit].get(file)
        if data is None:
            return self._error(h, 404, "EntryNotFound", head, {"X-Repo-Commit": commit})
        if file.endswith(LFS_SUFFIXES):
            sha = hashlib.sha256(data).hexdigest()
            with self._lock:
                self.blobs[sha] = data
            headers = {
                "Location": f"{self.cdn_url}/cdn/{sha}",
                "X-Repo-Commit": commit,
                "X-Linked-Etag": f'"{sha}"',
                "X-Linked-Size": str(len(data)),
                "ETag": f'"{git_blob_sha1(data)}"',
            }
            return self._reply(h, 302, b"", headers, head)
        headers = {"X-Repo-Commit": commit, "ETag": f'"{git_blob_sha1(data)}"',
                   "Content-Type": "application/octet-stream"}
        self._reply(h, 200, data, headers, head)

    def _serve_blob(self, h, sha, head):
        data = self.blobs.get(sha)
        if data is None:
            return self._error(h, 404, "EntryNotFound", head)
        if sha in self.corrupt:
            data = bytes([data[0] ^ 0xFF]) + data[1:]
        start = 0
        rng = h.headers.get("Range")
        status = 200
        if rng and rng.startswith("bytes=") and rng.endswith("-"):
            start = int(rng[6:-1])
            status = 206
        body = data[start:]
        headers = {"Content-Type": "application/octet-stream", "ETag": f'"{sha}"'}
        if status == 206:
            headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
        cut = None
        with self._lock:
            if sha in self.drop_after and not head:
                cut = self.drop_after.pop(sha)
        if cut is None:
            return self._reply(h, status, body, headers, head)
        h.send_response(status)
        headers["Content-Length"] = str(len(body))
        for k, v in headers.items():
            h.send_header(k, v)
        h.end_headers()
        h.wfile.write(body[:cut])
        h.wfile.flush()
        h.close_connection = True
        h.connection.shutdown(2)
