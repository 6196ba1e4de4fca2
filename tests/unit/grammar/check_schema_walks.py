#!/usr/bin/python3
"""Random generations under each schema in schemas/ parse as JSON and validate.

For every schema file and each of --seeds seeds, grammar_probe draws tokens uniformly from the
grammar's mask over a synthetic 20,000-token vocabulary (past 64 tokens it steps towards
completion; a second set of seeds also steps towards completion on 20% of the earlier steps, so
strings close sooner and more of each schema is reached); each output must parse with Python's
json module and validate with Debian's python3-jsonschema (the schema's own draft, formats the
grammar enforces checked too). A few seeds also run compact and over the Qwen-sized vocabulary.
Exits 77 (skipped) without jsonschema.
"""
import argparse
import json
import pathlib
import subprocess
import sys

try:
    import jsonschema
except ImportError:
    print("python3-jsonschema is not installed: skipped")
    sys.exit(77)


def walks(probe, schema_path, seeds, extra):
    cmd = [probe, "walk", "--schema", str(schema_path), "--seeds", str(seeds)] + extra
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if run.returncode != 0:
        raise SystemExit(f"FAIL {' '.join(cmd)}: {run.stderr.strip()}")
    return [json.loads(line) for line in run.stdout.splitlines()]


def whitespace_outside_strings(text):
    in_string = escaped = False
    for c in text:
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in " \t\n\r":
            return True
    return False


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("probe")
    ap.add_argument("schemas")
    ap.add_argument("--seeds", type=int, default=100)
    args = ap.parse_args()

    files = sorted(pathlib.Path(args.schemas).glob("*.json"))
    if len(files) < 10:
        raise SystemExit(f"FAIL expected at least 10 schemas in {args.schemas}, found {len(files)}")
    checker = jsonschema.FormatChecker(formats=["date", "uuid"])
    failures = 0
    total = 0
    for path in files:
        schema = json.loads(path.read_text())
        validator_class = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        validator_class.check_schema(schema)
        validator = validator_class(schema, format_checker=checker)
        runs = [("uniform", walks(args.probe, path, args.seeds, [])),
                ("uniform with 20% progress steps", walks(args.probe, path, args.seeds, ["--progress", "20", "--first", "500"])),
                ("compact", walks(args.probe, path, 5, ["--compact", "--first", "1000"])),
                ("qwen-size vocabulary", walks(args.probe, path, 2, ["--vocab", "qwen", "--first", "2000"]))]
        for mode, outputs in runs:
            for out in outputs:
                total += 1
                text = out["text"]
                try:
                    value = json.loads(text)
                except json.JSONDecodeError as e:
                    failures += 1
                    print(f"FAIL {path.name} ({mode}) seed {out['seed']}: not JSON ({e}): {text!r}")
                    continue
                errors = list(validator.iter_errors(value))
                if errors:
                    failures += 1
                    print(f"FAIL {path.name} ({mode}) seed {out['seed']}: {errors[0].message}: {text!r}")
                if mode == "compact" and whitespace_outside_strings(text):
                    failures += 1
                    print(f"FAIL {path.name} (compact) seed {out['seed']}: whitespace outside strings: {text!r}")
        print(f"{path.name}: {sum(len(o) for _, o in runs)} outputs checked")
    print(f"{total} outputs, {failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
