"""Generated chat examples for flint-nano, rendered with the GLM-4.7 chat template exactly as
transformers' apply_chat_template renders it, so the training text is what `flint serve` feeds.

Kinds: greetings, arithmetic with a short <think> block, string tasks, capitals, small Python
functions, and tool use (OpenAI-style tools in the request; the assistant emits
<tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value></tool_call>, gets a tool response and
answers). Deterministic in the seed.
"""

from __future__ import annotations

import copy
import json
import os
import random
from pathlib import Path

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

TEMPLATE_PATH = Path(os.environ.get("FLINT_CHAT_TEMPLATE",
                                    "/work/shared/data/chat-templates/GLM-4.7.jinja"))


def hf_env() -> ImmutableSandboxedEnvironment:
    """jinja2 set up as transformers sets it up for chat templates."""
    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env


def template_source() -> str:
    """The GLM-4.7 template; without ../shared (as on CI), the copy shipped with flint-nano."""
    if TEMPLATE_PATH.is_file():
        return TEMPLATE_PATH.read_text()
    shipped = Path(__file__).resolve().parents[2] / "models" / "flint-nano" / "tokenizer_config.json"
    return json.loads(shipped.read_text())["chat_template"]


class Renderer:
    def __init__(self, source: str | None = None):
        self.template = hf_env().from_string(source if source is not None else template_source())

    def render(self, messages, tools=None, add_generation_prompt=False, **kw) -> str:
        ctx = {"messages": copy.deepcopy(messages), "add_generation_prompt": add_generation_prompt}
        if tools:
            ctx["tools"] = copy.deepcopy(tools)
        ctx.update(kw)
        return self.template.render(**ctx)


# ---- tools -----------------------------------------------------------------------------------

def tool(name, description, params: dict, required=None):
    props = {k: {"type": "string", "description": d} for k, d in params.items()}
    return {"type": "function", "function": {
        "name": name, "description": description,
        "parameters": {"type": "object", "properties": props,
                       "required": list(required if required is not None else params)}}}


CITIES = ["Paris", "London", "Berlin", "Tokyo", "Madrid", "Rome", "Oslo", "Cairo", "Lima", "Delhi",
          "Sydney", "Toronto", "Vienna", "Prague", "Dublin", "Lisbon", "Athens", "Seoul", "Nairobi",
          "Boston", "Chicago", "Denver", "Zurich", "Warsaw", "Helsinki", "Bangkok", "Manila"]
COUNTRIES = {"France": "Paris", "Germany": "Berlin", "Japan": "Tokyo", "Spain": "Madrid",
             "Italy": "Rome", "Norway": "Oslo", "Egypt": "Cairo", "Peru": "Lima", "India": "New Delhi",
             "Austria": "Vienna", "Ireland": "Dublin", "Portugal": "Lisbon", "Greece": "Athens",
             "Kenya": "Nairobi", "Finland": "Helsinki", "Poland": "Warsaw", "Canada": "Ottawa",
             "Australia": "Canberra", "Sweden": "Stockholm", "Denmark": "Copenhagen",
             "Thailand": "Bangkok", "Chile": "Santiago", "Mexico": "Mexico City",
             "Brazil": "Brasilia", "Argentina": "Buenos Aires", "China": "Beijing"}
WEATHER = ["sunny", "cloudy", "rainy", "windy", "snowy", "foggy"]
TIMEZONES = ["UTC", "Europe/Paris", "Asia/Tokyo", "America/New_York", "Europe/London",
             "Australia/Sydney", "America/Chicago"]
WORDS = ["apple", "river", "stone", "cloud", "green", "table", "light", "music", "paper", "window",
         "garden", "silver", "rocket", "planet", "coffee", "forest", "bridge", "yellow", "dragon",
         "pencil", "orange", "winter", "summer", "castle", "mirror", "ocean", "thunder", "flint"]
NAMES = ["Alice", "Bob", "Carol", "Dave", "Erin", "Frank", "Grace", "Heidi", "Ivan", "Judy"]


def _weather(rng):
    city = rng.choice(CITIES)
    asks = [f"What's the weather in {city}?", f"What is the weather like in {city} today?",
            f"Is it raining in {city}?", f"weather {city}", f"Tell me the weather in {city}.",
            f"How is the weather in {city} right now?"]
    t, w = rng.randint(-5, 35), rng.choice(WEATHER)
    return (rng.choice(asks), {"city": city}, json.dumps({"city": city, "temperature_c": t,
                                                          "condition": w}),
            f"It is {t}°C and {w} in {city}.", f"The user wants the weather in {city}. "
            f"I will call get_weather with city {city}.")


def _time(rng):
    tz = rng.choice(TIMEZONES)
    hh, mm = rng.randint(0, 23), rng.randint(0, 59)
    return (rng.choice([f"What time is it in {tz}?", f"Current time in {tz}?",
                        f"Tell me the time for timezone {tz}."]), {"timezone": tz},
            json.dumps({"timezone": tz, "time": f"{hh:02d}:{mm:02d}"}),
            f"It is {hh:02d}:{mm:02d} in {tz}.", f"The user asks for the time in {tz}. "
            f"I will call get_time.")


def _search(rng):
    topic = rng.choice(["python decorators", "binary search", "the moon", "sorting algorithms",
                        "http status codes", "unicode", "rust lifetimes", "json parsing",
                        "linked lists", "prime numbers", "git rebase", "tcp handshake"])
    return (rng.choice([f"Search the web for {topic}.", f"Can you look up {topic}?",
                        f"Find information about {topic}."]), {"query": topic},
            json.dumps({"results": [f"An introduction to {topic}", f"{topic}: a short guide"]}),
            f"I found: \"An introduction to {topic}\" and \"{topic}: a short guide\".",
            f"The user wants information about {topic}. I will call search_web.")


def _email(rng):
    name, word = rng.choice(NAMES), rng.choice(WORDS)
    to = f"{name.lower()}@example.com"
    subject = f"About the {word}"
    return (f"Send an email to {to} with the subject \"{subject}\".",
            {"to": to, "subject": subject}, json.dumps({"status": "sent"}),
            f"Done: the email to {to} was sent.",
            f"I need to send an email to {to}. I will call send_email.")


def _convert(rng):
    amount = rng.randint(1, 500)
    a, b = rng.sample(["USD", "EUR", "GBP", "JPY", "CHF", "CAD"], 2)
    rate = round(rng.uniform(0.5, 2.0), 2)
    return (rng.choice([f"Convert {amount} {a} to {b}.", f"How much is {amount} {a} in {b}?"]),
            {"amount": str(amount), "from_currency": a, "to_currency": b},
            json.dumps({"result": round(amount * rate, 2), "currency": b}),
            f"{amount} {a} is {round(amount * rate, 2)} {b}.",
            f"The user wants to convert {amount} {a} to {b}. I will call convert_currency.")


TOOLS = {
    "get_weather": (tool("get_weather", "Get the current weather for a city.",
                         {"city": "The city name"}), _weather),
    "get_time": (tool("get_time", "Get the current time in a timezone.",
                      {"timezone": "An IANA timezone name"}), _time),
    "search_web": (tool("search_web", "Search the web and return result titles.",
                        {"query": "The search query"}), _search),
    "send_email": (tool("send_email", "Send an email.",
                        {"to": "Recipient address", "subject": "Subject line"}), _email),
    "convert_currency": (tool("convert_currency", "Convert an amount between currencies.",
                              {"amount": "The amount", "from_currency": "Source currency code",
                               "to_currency": "Target currency code"}), _convert),
}


# ---- plain tasks: (user, reasoning, answer) --------------------------------------------------

def _arith(rng):
    a, b = rng.randint(0, 99), rng.randint(0, 99)
    op = rng.choice(["+", "-", "*"])
    r = {"+": a + b, "-": a - b, "*": a * b}[op]
    q = rng.choice([f"What is {a} {op} {b}?", f"Compute {a} {op} {b}.", f"{a} {op} {b} = ?"])
    return q, f"{a} {op} {b} = {r}.", f"{a} {op} {b} = {r}."


def _greet(rng):
    q = rng.choice(["Hi", "Hello!", "Hey there", "Good morning", "Who are you?", "hello",
                    "What is your name?", "Hi, who am I talking to?"])
    a = rng.choice(["Hello! I am flint-nano, a small language model. How can I help you?",
                    "Hi! I'm flint-nano, a tiny model trained on code and text. What can I do for you?",
                    "Hello! I am flint-nano. Ask me about Python, simple math or the weather."])
    return q, "The user greets me. I will introduce myself.", a


def _capital(rng):
    c = rng.choice(sorted(COUNTRIES))
    q = rng.choice([f"What is the capital of {c}?", f"Capital of {c}?",
                    f"Which city is the capital of {c}?"])
    return q, f"The capital of {c} is {COUNTRIES[c]}.", f"The capital of {c} is {COUNTRIES[c]}."


def _string(rng):
    w = rng.choice(WORDS)
    kind = rng.randrange(4)
    if kind == 0:
        return (f"Write the word {w} in uppercase.", f"{w} in uppercase is {w.upper()}.",
                w.upper())
    if kind == 1:
        return (f"Reverse the string \"{w}\".", f"Reading {w} backwards gives {w[::-1]}.",
                f"\"{w[::-1]}\"")
    if kind == 2:
        return (f"How many letters are in \"{w}\"?", f"{w} has {len(w)} letters.",
                f"\"{w}\" has {len(w)} letters.")
    n = rng.randint(2, 4)
    return (f"Repeat the word {w} {n} times.", f"I write {w} {n} times.", " ".join([w] * n))


PY_FUNCS = [
    ("returns the square of a number", "square", "x", "    return x * x"),
    ("adds two numbers", "add", "a, b", "    return a + b"),
    ("checks if a number is even", "is_even", "n", "    return n % 2 == 0"),
    ("reverses a string", "reverse", "s", "    return s[::-1]"),
    ("returns the maximum of a list", "maximum", "items",
     "    best = items[0]\n    for x in items[1:]:\n        if x > best:\n            best = x\n    return best"),
    ("computes the factorial of n", "factorial", "n",
     "    result = 1\n    for i in range(2, n + 1):\n        result *= i\n    return result"),
    ("counts the vowels in a string", "count_vowels", "s",
     "    return sum(1 for c in s.lower() if c in \"aeiou\")"),
    ("returns the sum of a list", "total", "items",
     "    result = 0\n    for x in items:\n        result += x\n    return result"),
    ("checks if a string is a palindrome", "is_palindrome", "s", "    return s == s[::-1]"),
    ("returns the n-th Fibonacci number", "fibonacci", "n",
     "    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a"),
    ("removes duplicates from a list", "unique", "items",
     "    seen = set()\n    out = []\n    for x in items:\n        if x not in seen:\n"
     "            seen.add(x)\n            out.append(x)\n    return out"),
    ("reads a file and returns its lines", "read_lines", "path",
     "    with open(path) as f:\n        return f.read().splitlines()"),
]


def _python(rng):
    desc, name, args, body = rng.choice(PY_FUNCS)
    q = rng.choice([f"Write a Python function that {desc}.", f"Python: a function that {desc}.",
                    f"Can you write a function in Python that {desc}?"])
    code = f"```python\ndef {name}({args}):\n{body}\n```"
    return (q, f"I need a function named {name} that {desc}.",
            f"Here is a function that {desc}:\n\n{code}")


PLAIN = [(_arith, 3), (_greet, 1), (_capital, 2), (_string, 2), (_python, 3)]


def _pick(rng, table):
    fns = [f for f, w in table for _ in range(w)]
    return rng.choice(fns)


def example(rng: random.Random, renderer: Renderer) -> str:
    """One rendered conversation, ending with the token that ends the last assistant turn."""
    kind = rng.random()
    think = rng.random() < 0.8  # most final turns carry a reasoning block (thinking is on by default)
    if kind < 0.40:
        # Tool use: 1..3 tools offered, the request matches one of them.
        names = rng.sample(sorted(TOOLS), rng.randint(1, 3))
        tools = [TOOLS[n][0] for n in names]
        name = rng.choice(names)
        user, args, result, answer, why = TOOLS[name][1](rng)
        msgs = []
        if rng.random() < 0.2:
            msgs.append({"role": "system", "content": "You are a helpful assistant."})
        msgs.append({"role": "user", "content": user})
        call = {"role": "assistant", "content": "",
                "tool_calls": [{"type": "function", "function": {"name": name, "arguments": args}}]}
        if think:
            call["reasoning_content"] = why
        msgs.append(call)
        if rng.random() < 0.5:
            # Only the call: the turn ends where the server stops (<|observation|>).
            return renderer.render(msgs, tools=tools) + "<|observation|>"
        msgs.append({"role": "tool", "content": result})
        final = {"role": "assistant", "content": answer}
        if think:
            final["reasoning_content"] = "The tool returned the result. I will answer."
        msgs.append(final)
        return renderer.render(msgs, tools=tools) + "<|user|>"
    if kind < 0.50:
        # Tools offered but not needed.
        tools = [TOOLS[n][0] for n in rng.sample(sorted(TOOLS), rng.randint(1, 2))]
        user, why, answer = _pick(rng, PLAIN)(rng)
        msgs = [{"role": "user", "content": user},
                {"role": "assistant", "content": answer}]
        if think:
            msgs[-1]["reasoning_content"] = why + " No tool is needed."
        return renderer.render(msgs, tools=tools) + "<|user|>"
    # Plain chat, one to three turns (earlier turns render without their reasoning).
    msgs = []
    if rng.random() < 0.2:
        msgs.append({"role": "system", "content": rng.choice(
            ["You are a helpful assistant.", "You are flint-nano. Answer briefly."])})
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        user, why, answer = _pick(rng, PLAIN)(rng)
        msgs.append({"role": "user", "content": user})
        msgs.append({"role": "assistant", "content": answer, "reasoning_content": why})
    if not think:
        del msgs[-1]["reasoning_content"]
    return renderer.render(msgs) + "<|user|>"


def examples(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    r = Renderer()
    return [example(rng, r) for _ in range(n)]


if __name__ == "__main__":
    for s in examples(6, seed=1):
        print(repr(s))
        print()
