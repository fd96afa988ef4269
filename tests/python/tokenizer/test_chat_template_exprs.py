"""Chat-template interpreter against Python Jinja2 (configured as transformers does) on a corpus of
small templates covering statements, whitespace control, operators, filters, tests, methods and
error cases. Each must render byte-identically, or both must raise."""
import json
import os
import subprocess
import tempfile
from pathlib import Path

from test_chat_template_parity import NOW, TOOL, reference_render

CTX = {
    "s": "  Hello, World  ", "u": "héllo wörld ÆØ 你好 😀", "n": 7, "f": 2.5, "neg": -3, "t": True,
    "z": None, "e": "", "big": 12345678901234, "tiny": 1e-7, "huge": 1.5e300, "third": 1 / 3,
    "l": [3, 1, 2], "words": ["b", "A", "c", "a"], "nested": [[1, 2], [3, [4, 5]]],
    "d": {"b": 1, "a": {"x": [1, 2.0, None, True, "é\n\"q\""]}, "items": "key-items"},
    "msgs": [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"},
             {"role": "assistant", "content": None, "tool_calls": [{"name": "f"}]},
             {"role": "user", "content": "bye"}],
    "quote": "it's \"quoted\" \\ back",
}

SNIPPETS = [
    # output of values, Python str()/repr()
    "{{ n }}|{{ f }}|{{ neg }}|{{ t }}|{{ z }}|{{ e }}|{{ big }}|{{ tiny }}|{{ huge }}|{{ third }}",
    "{{ l }}|{{ d }}|{{ nested }}|{{ (1, 'a') }}|{{ (1,) }}|{{ () }}|{{ [] }}|{{ {} }}",
    "{{ quote }}|{{ [quote] }}|{{ ['it\\'s'] }}|{{ {'k': \"v'\"} }}|{{ ['\\n\\t\\x01'] }}",
    "{{ 1.0 }}|{{ 1e16 }}|{{ 1.5e-5 }}|{{ 0.0001 }}|{{ 123456789.125 }}|{{ -0.0 }}|{{ 10/4 }}",
    "{{ undefined_var }}|{{ d.missing }}|{{ d['missing'] }}|{{ l[10] }}",
    # operators
    "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 7 / 2 }} {{ 1 + 2 * 3 }}",
    "{{ 'a' ~ 1 ~ none ~ true }} {{ 'ab' * 3 }} {{ [1] + [2] }} {{ 'x' + 'y' }} {{ -n }} {{ +f }}",
    "{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 'a' in 'cat' }} {{ 2 not in l }} {{ 'b' in d }} {{ 1 == 1.0 }}",
    "{{ n and 'yes' }} {{ z or 'fallback' }} {{ not e }} {{ 'x' if t else 'y' }} {{ 'x' if z }}!",
    "{{ l[0] }} {{ l[-1] }} {{ l[1:] }} {{ l[::-1] }} {{ l[:-1] }} {{ u[1:4] }} {{ u[::-1] }} {{ u[-2] }}",
    "{{ words[1:3] }} {{ words[::2] }} {{ words[5:] }} {{ u[:5] }} {{ 'abcdef'[-9:] }} {{ l[-2::-1] }}",
    "{{ d.a.x[4] }} {{ d['a']['x'][0] }} {{ d['items'] }} {{ msgs[1].content }} {{ nested.1.1.0 }}",
    # statements
    "{% for x in l %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.first }}{{ loop.last }}{{ loop.length }},{% endfor %}",
    "{% for x in l %}{{ loop.previtem }}-{{ loop.nextitem }}-{{ loop.cycle('a','b') }};{% endfor %}",
    "{% for x in [] %}x{% else %}empty{% endfor %}|{% for k in d %}{{ k }},{% endfor %}",
    "{% for m in msgs if m.role == 'user' %}{{ loop.index }}:{{ m.content }} {% endfor %}",
    "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for a, b in [[1, 2], (3, 4)] %}{{ a + b }}{% endfor %}",
    "{% for x in range(10) %}{% if x == 5 %}{% break %}{% endif %}{% if x is odd %}{% continue %}{% endif %}{{ x }}{% endfor %}",
    "{% set x = 1 %}{% for i in l %}{% set x = x + i %}{{ x }}{% endfor %}|{{ x }}",
    "{% set ns = namespace(total=0, items=[]) %}{% for i in l %}{% set ns.total = ns.total + i %}{% endfor %}{{ ns.total }}",
    "{% set a, b = [1, 2] %}{{ a }}{{ b }}{% set c = 1, 2 %}{{ c }}",
    "{% set block %}inner {{ n }}{% endset %}[{{ block }}]{% set up | upper %}abc{% endset %}{{ up }}",
    "{% macro m(a, b='dflt', c=n) %}<{{ a }}|{{ b }}|{{ c }}>{% endmacro %}{{ m(1) }}{{ m(1, 2) }}{{ m(a=3, c=4) }}",
    "{% macro outer() %}[{{ caller() }}]{% endmacro %}{% call outer() %}body {{ n }}{% endcall %}",
    "{% macro rec(x) %}{% if x > 0 %}{{ x }}{{ rec(x - 1) }}{% endif %}{% endmacro %}{{ rec(4) }}",
    "{% filter upper %}shout {{ s }}{% endfilter %}",
    "{% if z %}a{% elif n > 5 %}b{% else %}c{% endif %}{% if not z is none %}x{% endif %}",
    "{% raw %}{{ not rendered }}{% endraw %}",
    "{# a comment #}after",
    # whitespace control, trim_blocks, lstrip_blocks
    "a\n  {% if t %}\n  yes\n  {% endif %}\nb",
    "a  {%- if t -%}  x  {%- endif -%}  b\n{{- n -}}\n  c",
    "line1\n    {# comment #}\nline2\n  {%+ if t %}kept{% endif +%}\nz",
    "{% for i in l %}\n  {{ i }}\n{% endfor %}\n",
    "x {{ n }}  \n  {{ f }}\n",
    "  {% if t %}lead{% endif %}  {% if t %}mid{% endif %}\n",
    "a\r\nb\rc\n{% if t %}\r\nd{% endif %}\n\n",
    # filters
    "{{ s|trim }}|{{ s|length }}|{{ u|length }}|{{ l|count }}|{{ d|length }}|{{ s|upper }}|{{ s|lower }}",
    "{{ 'hello wORLD-foo(bar' |title }}|{{ 'hello world'|capitalize }}|{{ s|replace('l', 'L') }}|{{ s|replace('l', '', 1) }}",
    "{{ undefined_var|default('dv') }}|{{ e|default('ev') }}|{{ e|default('ev', true) }}|{{ z|d('zz') }}",
    "{{ l|first }}{{ l|last }}{{ l|sort }}{{ l|sort(reverse=true) }}{{ words|sort }}{{ words|sort(case_sensitive=true) }}",
    "{{ words|unique|list }}{{ l|reverse|list }}{{ 'abc'|reverse }}{{ l|min }}{{ l|max }}{{ l|sum }}",
    "{{ l|join(', ') }}|{{ words|join }}|{{ msgs|map(attribute='role')|join('/') }}|{{ l|map('string')|list }}",
    "{{ msgs|selectattr('role', 'equalto', 'user')|map(attribute='content')|list }}|{{ msgs|rejectattr('content')|list|length }}",
    "{{ [0, 1, '', 'x', none]|select|list }}|{{ l|select('odd')|list }}|{{ l|reject('even')|list }}|{{ msgs|selectattr('tool_calls', 'defined')|list|length }}",
    "{{ d|dictsort }}|{{ {'b': 2, 'A': 1, 'a': 3}|dictsort }}|{{ {'b': 2, 'a': 1}|dictsort(by='value', reverse=true) }}",
    "{{ d|items|list }}|{{ d|list }}|{{ '12'|int + 1 }}|{{ '3.7'|int }}|{{ 'x'|int }}|{{ 3.9|int }}|{{ '2.5'|float }}|{{ n|float }}",
    "{{ -3|abs }}|{{ neg|abs }}|{{ 2.567|round(2) }}|{{ 2.5|round }}|{{ 3.5|round }}|{{ 2.1|round(0, 'ceil') }}|{{ l|batch(2)|list }}",
    "{{ 'one two  three'|wordcount }}|{{ 'a\nb\n\nc'|indent }}|{{ 'a\nb'|indent(2, true) }}|{{ 'x'|center(7) }}|{{ '<&>'|e }}|{{ n|string }}",
    "{{ d|tojson }}|{{ d|tojson(indent=2) }}|{{ msgs[2]|tojson(sort_keys=true) }}|{{ u|tojson }}|{{ u|tojson(ensure_ascii=true) }}",
    "{{ [1.0, 0.1, 1e20, -2, true, none, 'x<y>&']|tojson }}|{{ {'a': 1}|tojson(separators=(',', ':')) }}|{{ l|tojson(indent='\\t') }}|{{ []|tojson(indent=2) }}",
    "{{ '%s-%d-%.2f'|format('a', 3, 2.5) }}|{{ '%s and %s' % ('x', 'y') }}|{{ 'v=%d' % n }}|{{ s|safe }}",
    # tests
    "{{ n is defined }}{{ nope is defined }}{{ nope is undefined }}{{ z is none }}{{ s is string }}{{ n is number }}{{ t is number }}",
    "{{ n is integer }}{{ f is float }}{{ t is boolean }}{{ d is mapping }}{{ l is iterable }}{{ s is iterable }}{{ l is sequence }}{{ d is sequence }}",
    "{{ n is odd }}{{ n is even }}{{ 9 is divisibleby 3 }}{{ n is eq 7 }}{{ n is equalto 7 }}{{ n is ne 7 }}{{ n is lt 10 }}{{ n is ge 7 }}",
    "{{ 'b' is in 'abc' }}{{ t is true }}{{ z is false }}{{ z is sameas none }}{{ range is callable }}{{ 'abc' is lower }}{{ n is not string }}",
    "{{ nope is iterable }}{{ nope is sequence }}{{ nope is mapping }}{{ t is sameas true }}{{ 1 is sameas true }}",
    # methods
    "{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}|{{ 'xxaxx'.strip('x') }}|{{ '\n a \t'.strip() }}",
    "{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a,b,c'.split(',', 1) }}|{{ 'a,b,c'.rsplit(',', 1) }}|{{ ' a b c '.rsplit(None, 1) }}",
    "{{ s.startswith('  He') }}{{ s.endswith('x') }}{{ 'abc'.startswith(('x', 'a')) }}|{{ s.replace('l', 'L', 2) }}|{{ u.upper() }}|{{ u.lower() }}",
    "{{ 'hello world'.title() }}|{{ \"they're bill's\".title() }}|{{ 'HELLO'.capitalize() }}|{{ s.find('l') }}|{{ u.find('w') }}|{{ s.count('l') }}",
    "{{ '-'.join(['a', 'b']) }}|{{ 'a\nb\r\nc'.splitlines() }}|{{ '42'.isdigit() }}|{{ 'ab'.isalpha() }}|{{ 'x'.center(5, '*') }}|{{ '{} and {}'.format(1, 'b') }}",
    "{{ d.get('b') }}|{{ d.get('q') }}|{{ d.get('q', 'dflt') }}|{{ d.keys()|list }}|{{ d.values()|list|length }}|{{ l.index(2) }}|{{ l.count(3) }}",
    "{{ 'a<think>b</think>c'.split('</think>')[-1].lstrip('\\n') }}|{{ ('x' ~ s).rstrip() }}",
    # iterators and views behave as in Python
    "{% if []|select %}T{% endif %}|{{ d.items()|length }}|{{ d.items() }}|{{ d.keys()[0] }}|{{ (l|map('abs')|list)[0] }}",
    "{{ l|select|length }}",
    "{{ d.keys()|tojson }}",
    "{{ l|map('string')|last }}",
    "{% macro m() %}x{% endmacro %}{{ m(1) }}",
    "{% macro m(a) %}x{% endmacro %}{{ m(b=1) }}",
    "{% macro m() %}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, k=3) }}",
    "{% set ns = namespace(a=1) %}{% set ns.me = ns %}{{ ns }}|{{ ns.me.me.a }}",
    # globals
    "{{ range(3)|list }}{{ range(1, 10, 3)|list }}{{ range(5, 0, -2)|list }}{{ dict(a=1, b='x') }}{{ namespace(a=1).a }}",
    "{{ strftime_now('%Y-%m-%d %H:%M %b %A') }}",
    # errors: both must raise
    "{{ raise_exception('custom failure') }}",
    "{{ nope.attr }}",
    "{{ nope['k'] }}",
    "{{ nope() }}",
    "{{ 1 + nope }}",
    "{{ 'a' + 1 }}",
    "{{ 1 / 0 }}",
    "{{ l.append(4) }}",
    "{{ d.update({}) }}",
    "{{ z|length }}",
    "{% for x in z %}{% endfor %}",
    "{{ nope|tojson }}",
    "{{ range(1000000)|length }}",
    "{{ nope|dictsort }}",
    "{{ 'a' < 1 }}",
    "{% set x.y = 1 %}",
    "{% if %}",
    "{% for x in l %}",
    "{{ 1 + }}",
    "{% endif %}",
    "{% unknowntag %}",
    "{{ 'unterminated }}",
    "{{ (1 }}",
    "{% macro m( %}{% endmacro %}",
    "{{ n is nosuchtest }}",
    "{{ n|nosuchfilter }}",
    "{# unterminated comment",
]


def test_snippets_match_jinja2():
    cases = [{"__template__": s, "context": CTX} for s in SNIPPETS]
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False, encoding="utf-8") as f:
        json.dump(cases, f, ensure_ascii=False)
        path = f.name
    try:
        out = subprocess.run([str(TOOL), "/dev/null", path, str(NOW)], capture_output=True,
                             check=True, timeout=60)
    finally:
        os.unlink(path)
    got = json.loads(out.stdout.decode("utf-8"))
    failures = []
    for snippet, mine in zip(SNIPPETS, got):
        ok, want = reference_render(snippet, CTX)
        if ok and not mine["ok"]:
            failures.append(f"{snippet!r}: jinja2 gave {want!r}, we failed: {mine['error']}")
        elif ok and mine["text"] != want:
            failures.append(f"{snippet!r}:\n   ours {mine['text']!r}\n   want {want!r}")
        elif not ok and mine["ok"]:
            failures.append(f"{snippet!r}: jinja2 raised ({want}), we rendered {mine['text']!r}")
    print(f"{len(SNIPPETS) - len(failures)}/{len(SNIPPETS)} snippets match")
    assert not failures, "\n".join(failures)


def test_syntax_errors_name_line_and_column():
    cases = [{"__template__": "line one\n{% if x %}\n  {{ 1 + }}\n{% endif %}", "context": {}},
             {"__template__": "ok\n\n   {% foo %}", "context": {}}]
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(cases, f)
        path = f.name
    try:
        got = json.loads(subprocess.run([str(TOOL), "/dev/null", path], capture_output=True,
                                        check=True, timeout=60).stdout)
    finally:
        os.unlink(path)
    assert not got[0]["ok"] and "line 3, column 10" in got[0]["error"], got[0]
    assert not got[1]["ok"] and "line 3, column 7" in got[1]["error"], got[1]
    assert "unknown tag 'foo'" in got[1]["error"]
