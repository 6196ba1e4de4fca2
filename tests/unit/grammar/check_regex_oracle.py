#!/usr/bin/python3
"""The matcher against Python's `re` on regular languages.

1. JSON Schema `pattern`: for each pattern, strings over a small alphabet (all short ones, then
   random longer ones) are JSON-encoded as json.dumps writes them; grammar_probe must accept the
   encoding exactly when re.search(pattern, s) finds a match; so for near misses of random
   generations under the pattern (one character replaced, inserted or removed). The generations
   themselves must decode to strings that re.search matches.
2. GBNF: regular grammars with an equivalent Python regex; grammar_probe accepts a string exactly
   when re.fullmatch accepts it.
The alphabets avoid the characters where ECMAScript and Python regexes differ (line
terminators for `.`, Python-only spaces for \\s, non-ASCII for the negated shorthands).
"""
import itertools
import json
import random
import re
import subprocess
import sys

PATTERNS = [
    (r"^[a-z]+$", "abzAZ09"),
    (r"ab", "abc"),
    (r"^\d{3}-\d{2,4}$", "0189-a"),
    (r"^(cat|dog)s?$", "catdogsx"),
    (r"^a.c$", "abc\t é中"),
    (r"^[^a-c]{2}$", "abcdé中\""),
    (r"x|y$", "xyz"),
    (r"^$", "ab"),
    (r"^[\w.-]+@[\w-]+\.[a-z]{2,3}$", "ab1_.-@cz"),
    (r"^(a|b)*c{1,2}$", "abc"),
    (r"\"|\\", "ab\"\\"),
    (r"^\s\S$", " \tab"),
    (r"^[\d\s]+$", "12 \ta"),
    (r"^[^\d]+$", "a1 ?"),
    (r"^\x41\u00e9$", "Aéx"),
    (r"^(?:ab){2,}$", "ab"),
    (r"^a+?b*?$", "ab"),
    (r"^[a\-z]$", "a-zb"),
    (r"^a{x}$", "a{x}"),
    (r"^[à-ÿ]+$", "àéÿa"),
    (r"^.{2,3}$", "a中😀\t"),
    (r"^[\u4e00-\u9fff]{1,2}$", "一丁xé"),
    (r"^\t\x01[\x00-\x1f]$", "\t\x01\x02\x1fa"),
    (r"(ab|cd)+e", "abcde"),
]

GBNF = [
    ('root ::= "a" [bc]* "d"', r"a[bc]*d", "abcd"),
    ('root ::= ("ab" | "c"){2,3} "x"?', r"(?:ab|c){2,3}x?", "abcx"),
    ('root ::= x+ y\nx ::= [0-9]\ny ::= "." [0-9]{1,2} | ""', r"[0-9]+(?:\.[0-9]{1,2})?", "09."),
    ('root ::= [^a]? "a"{2,}', r"[^a]?a{2,}", "ab\n"),
    ("root ::= . .?", r"(?s)..?", "a\né"),
    ('root ::= ("a" | "b" "c"*)*', r"(?:a|bc*)*", "abc"),
    ('root ::= ([a-c] [x-z])? "q"', r"(?:[a-c][x-z])?q", "acxzq"),
    ('root ::= "\\u00e9"+ [\\u4e00-\\u4e0f]', "é+[\u4e00-\u4e0f]", "é一丁x"),
    ('root ::= "a"? "a"? "a"? "aaa"', r"a?a?a?aaa", "a"),
    ('root ::= ("x"?)* "y"', r"(?:x?)*y", "xy"),
    ('root ::= [\\x00-\\x1F] "\\t"', r"[\x00-\x1f]\t", "\t\n\x00a"),
]


def candidates(alphabet, rng):
    out = set()
    for n in range(0, 5):
        if len(alphabet) ** n > 3000:
            break
        out.update("".join(p) for p in itertools.product(alphabet, repeat=n))
    for _ in range(400):
        out.add("".join(rng.choice(alphabet) for _ in range(rng.randint(0, 9))))
    return sorted(out)


def probe_match(probe, source, lines):
    run = subprocess.run([probe, "match"] + source, input="".join(json.dumps(l) + "\n" for l in lines),
                         capture_output=True, text=True, timeout=300)
    if run.returncode != 0:
        raise SystemExit(f"FAIL grammar_probe match {source}: {run.stderr.strip()}")
    return [r == "1" for r in run.stdout.split()]


def main():
    probe = sys.argv[1]
    rng = random.Random(5)
    failures = 0
    for pattern, alphabet in PATTERNS:
        walk = subprocess.run([probe, "walk", "--pattern", pattern, "--seeds", "30", "--progress", "30"],
                              capture_output=True, text=True, timeout=300)
        if walk.returncode != 0:
            raise SystemExit(f"FAIL walk {pattern!r}: {walk.stderr.strip()}")
        generated = [json.loads(json.loads(line)["text"]) for line in walk.stdout.splitlines()]
        # ECMAScript's `$` is Python's \Z (Python's `$` also matches before a final newline).
        oracle = re.compile(re.sub(r"(?<!\\)\$", r"\\Z", pattern))
        for g in generated:
            if oracle.search(g) is None:
                failures += 1
                print(f"FAIL pattern {pattern!r}: generated {g!r} does not match")
        # Near misses: generated strings with one character replaced, inserted or removed.
        strings = set(candidates(alphabet, rng))
        for g in generated:
            for _ in range(6):
                i = rng.randint(0, len(g))
                c = rng.choice(alphabet)
                strings.update({g[:i] + c + g[i + 1:], g[:i] + c + g[i:], g[:i] + g[i + 1:]})
        strings = sorted(strings)
        encoded = [json.dumps(s, ensure_ascii=False) for s in strings]
        got = probe_match(probe, ["--pattern", pattern], encoded)
        for s, g in zip(strings, got):
            want = oracle.search(s) is not None
            if g != want:
                failures += 1
                print(f"FAIL pattern {pattern!r} on {s!r}: grammar {g}, re {want}")
        print(f"pattern {pattern!r}: {len(strings)} strings and {len(generated)} generations checked")
    for gbnf, regex, alphabet in GBNF:
        strings = candidates(alphabet, rng)
        got = probe_match(probe, ["--gbnf-text", gbnf], strings)
        for s, g in zip(strings, got):
            want = re.fullmatch(regex, s) is not None
            if g != want:
                failures += 1
                print(f"FAIL gbnf {gbnf!r} on {s!r}: grammar {g}, re {want}")
        print(f"gbnf {gbnf!r}: {len(strings)} strings checked")
    print(f"{failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
