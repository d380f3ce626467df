"""Pages per commit in a copied SQLite WAL, by table and index.

    python3 wal-pages.py COPY.db      (COPY.db-wal beside it)

A WAL is a header and frames; a frame is one page's new image, and the last
frame of a commit records the database size. Frames of the WAL's current
generation carry its salts. Page numbers are mapped to their B-tree with
dbstat on the copy (opened with its WAL, so pages a commit added are known).
Commits that settle finished tasks (they write `tasks_finished_order`) are
counted apart from the others.
"""

import collections
import os
import shutil
import sqlite3
import struct
import sys
import tempfile

db = sys.argv[1]
wal = open(db + "-wal", "rb").read()
_magic, _version, page_size, _seq, salt1, salt2 = struct.unpack(">6I", wal[:24])
commits, current, offset = [], [], 32
while offset + 24 + page_size <= len(wal):
    page, db_size, s1, s2 = struct.unpack(">4I", wal[offset : offset + 16])
    if (s1, s2) != (salt1, salt2):
        break
    current.append(page)
    if db_size:
        commits.append(set(current))
        current = []
    offset += 24 + page_size

# Opening a database applies its WAL, and closing it checkpoints and
# deletes the WAL: work on a copy, so the capture can be read again.
with tempfile.TemporaryDirectory() as scratch:
    copy = os.path.join(scratch, "copy.db")
    shutil.copy(db, copy)
    shutil.copy(db + "-wal", copy + "-wal")
    con = sqlite3.connect(copy)
    tree = dict((p, n) for n, p in con.execute("SELECT name, pageno FROM dbstat"))
    con.close()


def report(label, group):
    if not group:
        return
    pages = collections.Counter(tree.get(p, "(free)") for c in group for p in c)
    total = sum(pages.values()) / len(group)
    print(f"{label}: {len(group)} commits, {total:.1f} pages per commit")
    for name, count in pages.most_common():
        print(f"  {name:28s} {count / len(group):6.2f}")


if not commits:
    sys.exit("no commit in the WAL's current generation: a checkpoint had just restarted it; capture again")
settles = [c for c in commits if any(tree.get(p) == "tasks_finished_order" for p in c)]
report("all", commits)
report("settling", settles)
report("others", [c for c in commits if c not in settles])
