"""Folds `perf script` output into one line per distinct stack:
`thread;outermost;...;innermost count`. Kernel frames end in `[k]`."""
import collections
import re
import sys

stacks = collections.Counter()
frames, thread = [], None
for line in sys.stdin:
    line = line.rstrip("\n")
    if not line.strip():
        if frames or thread:
            stacks[(thread or "?") + ";" + ";".join(reversed(frames))] += 1
        frames, thread = [], None
        continue
    if not line.startswith((" ", "\t")):
        thread = line.split()[0]
        continue
    parts = line.strip().split(" ", 1)
    if len(parts) == 2:
        symbol = re.sub(r"\+0x[0-9a-f]+", "", parts[1])
        kernel = "[kernel" in symbol
        frames.append(re.sub(r" \(.*\)$", "", symbol) + ("[k]" if kernel else ""))
for stack, count in stacks.items():
    print(stack, count)
