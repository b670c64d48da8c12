#!/usr/bin/env python3
"""Names the pages each commit of a WAL wrote: the frames of DB-wal grouped by
commit, each page named by the b-tree that held it at the end (dbstat), for the
last COMMITS commits (the store's own writes after its migrations).

Usage: wal_pages.py DB [COMMITS]     (DB with DB-wal beside it: wal_pages.rs's copy)

Works on a copy in a temp dir, so the files given are left as they are.
"""
import collections
import os
import shutil
import sqlite3
import struct
import sys
import tempfile


def frames(wal_path):
    """(page number, commit size) of every valid frame, in order."""
    with open(wal_path, "rb") as f:
        data = f.read()
    magic, _version, page_size, _seq, salt1, salt2 = struct.unpack(">IIIIII", data[:24])
    assert magic in (0x377F0682, 0x377F0683), "not a WAL"
    out, off = [], 32
    while off + 24 + page_size <= len(data):
        pgno, commit, s1, s2 = struct.unpack(">IIII", data[off:off + 16])
        if (s1, s2) != (salt1, salt2):
            break
        out.append((pgno, commit))
        off += 24 + page_size
    return out


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__.strip().splitlines()[3])
    db = sys.argv[1]
    last = int(sys.argv[2]) if len(sys.argv) == 3 else 500
    commits, cur = [], []
    for pgno, commit in frames(db + "-wal"):
        cur.append(pgno)
        if commit:
            commits.append(cur)
            cur = []
    with tempfile.TemporaryDirectory() as tmp:
        for suffix in ("", "-wal"):
            shutil.copy(db + suffix, os.path.join(tmp, "copy.db" + suffix))
        conn = sqlite3.connect(os.path.join(tmp, "copy.db"))
        names = dict((p, n) for n, p in conn.execute("SELECT name, pageno FROM dbstat"))
        conn.close()
    names[1] = names.get(1, "sqlite_schema") + " (page 1: header)"
    tail = commits[-last:]
    per_name = collections.Counter()
    for c in tail:
        for p in c:
            per_name[names.get(p, f"page {p} (freelist/other)")] += 1
    total = sum(len(c) for c in tail)
    print(f"{len(commits)} commits in the WAL; the last {len(tail)}: {total} frames, "
          f"{total / len(tail):.2f} per commit")
    for name, n in per_name.most_common():
        print(f"  {n / len(tail):5.2f} per commit  {name}")


if __name__ == "__main__":
    main()
