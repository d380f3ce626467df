"""Splits the server's sampled CPU into costs per cycle, two ways.

    categorize.py FOLDED HZ SECONDS CYCLES_PER_SEC

`where`: the part of the server a sample was in (an SQLite connection's
thread and what it was doing, or the tokio task: HTTP, the org actor, the
group-commit writer, the grouped reader, ...), from the frames of its
stack. `what`: the kind of work at the sample's innermost frame (kernel
file or network I/O, thread wake-ups, allocation, SQLite's own code, JSON,
crypto, ...). Each row is a share of the server's samples and the
microseconds of CPU per cycle that share stands for."""
import collections
import sys

path, hz, secs, cps = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
stacks = []
for line in open(path):
    stack, count = line.rsplit(" ", 1)
    stacks.append((stack.split(";"), int(count)))
total = sum(c for _, c in stacks)


def where(frames):
    j = ";".join(frames)
    # sqlx names its SQLite threads; the writer's own is `taskq-writer`.
    if frames[0].startswith(("sqlx-sqlite", "taskq-writer")):
        if "ConnectionWorker::ping" in j:
            return "sqlite thread: pool ping"
        if "sqlite3Prepare" in j or "sqlite3LockAndPrepare" in j:
            return "sqlite thread: statement prepare"
        if "sqlite3VdbeHalt" in j or "sqlite3_exec" in j:
            return "sqlite thread: BEGIN/COMMIT (WAL write, fsync)"
        if "sqlite3_step" in j or "StatementHandle::step" in j:
            return "sqlite thread: statement steps"
        if "park" in j or "flume" in j:
            return "sqlite thread: waiting for commands"
        return "sqlite thread: other"
    if "writer::run" in j:
        return "writer task (commit plan, binds, sqlx client)"
    if "reader::run" in j:
        return "reader task (claimed tasks' content)"
    if "OrgActor as ractor::actor::Actor>::handle" in j or "ractor::" in j:
        return "org actor (ractor)"
    if "json_body" in j:
        return "request body decode"
    if "Engine>::claim" in j:
        return "engine claim (await, views, decrypt)"
    if "Engine>::update_tasks" in j:
        return "engine update (await)"
    if "Engine>::authenticate" in j or "extract::Auth" in j:
        return "authentication"
    if "into_response" in j or "Json<T> as axum_core::response::IntoResponse" in j:
        return "response encode"
    if "hyper::" in j or "axum::" in j:
        return "HTTP (hyper/axum, socket I/O)"
    if "park" in j or "Driver::turn" in j:
        return "runtime idle/park, I/O driver"
    return "other"


def what(frames):
    leaf = frames[-1]
    j = ";".join(frames)
    if leaf.endswith("[k]"):
        if any(x in j for x in ("tcp_", "sock_", "inet_", "ip_", "net_rx", "__sys_recv", "sys_sendto")):
            return "kernel: network"
        if any(x in j for x in ("fsync", "ext4", "pwrite", "pread", "vfs_read", "vfs_write", "filemap", "blk_")):
            return "kernel: file I/O"
        if "futex" in j:
            return "kernel: futex (thread wake/sleep)"
        if "epoll" in j:
            return "kernel: epoll"
        return "kernel: scheduler/other"
    if any(x in leaf for x in ("malloc", "free", "mi_", "_int_", "realloc", "unlink_chunk", "alloc::")):
        return "allocation"
    if "memmove" in leaf or "memcpy" in leaf or "memset" in leaf:
        return "memcpy"
    if "serde_json" in j and "sqlite" not in leaf:
        return "JSON (serde_json)"
    if any(x in j for x in ("aes", "gcm", "ghash", "Aes", "sha2", "polyval")):
        return "crypto (AES-GCM, hashing)"
    if any(x in leaf for x in ("lll_", "mutex", "pthread", "futex")):
        return "runtime, channels, locks"
    if (any(x in leaf for x in ("wal", "balance", "yy_", "pager", "Pager", "pcache"))
            or leaf.startswith("sqlite3") or "btree" in leaf.lower() or "vdbe" in leaf.lower()):
        return "SQLite's own code"
    if "sqlx" in leaf:
        return "sqlx"
    if "hyper" in leaf or "httparse" in leaf or "http::" in leaf:
        return "HTTP parse/format"
    if any(x in leaf for x in ("tokio", "mio", "flume", "parking_lot", "syscall")):
        return "runtime, channels, locks"
    return "other user code"


cpu = total / hz
cycles = cps * secs
print(f"server: {total} samples, {cpu:.2f} CPU-s in {secs:.0f} s, "
      f"{cycles:.0f} cycles: {cpu / cycles * 1e6:.0f} us of CPU per cycle")
for name, split in (("where", where), ("what", what)):
    shares = collections.Counter()
    for frames, count in stacks:
        shares[split(frames)] += count
    print(f"\n| {name} | share | us/cycle |\n|---|---|---|")
    for key, count in shares.most_common():
        print(f"| {key} | {count / total * 100:.1f}% | {count / hz / cycles * 1e6:.1f} |")
