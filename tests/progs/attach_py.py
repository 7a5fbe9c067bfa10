# SPDX-License-Identifier: MIT
# attach_py.py: a Python program (Debian's python3) that allocates all the time, for
# tests/test_attach.c.
#
#   python3 attach_py.py run          rounds until stdin says "stop"
#   python3 attach_py.py fixed ROUNDS exactly ROUNDS rounds
#
# As attach_work.c: a round's work depends on its number only; the report
# "rounds=R sum=S bad=B" of a stopped run equals `fixed R`'s. "burst" on stdin: 20000
# bytearrays of 100000 bytes between two rounds, then "burst done".
import json
import sys
import threading
import zlib

stop = threading.Event()
burst = threading.Event()


def round_work(r, keep):
    s = 0
    big = bytearray(5000 + (r * 7919) % 60000)  # large blocks: the C allocator's malloc
    big[0] = r & 0xFF
    s += len(big) + big[0]
    lst = [str(r * i) * (1 + i % 7) for i in range(60)]
    d = {i: lst[i] for i in range(0, 60, 3)}
    text = json.dumps(d)
    s += zlib.crc32(text.encode()) + len(json.loads(text))
    slot = r % 128
    old = keep[slot]
    bad = 0
    if old is not None and (len(old) != 5000 + ((r - 128) * 7919) % 60000):
        bad = 1
    keep[slot] = big
    return s, bad


def main():
    mode = sys.argv[1]
    limit = int(sys.argv[2]) if mode == "fixed" else -1
    keep = [None] * 128
    total = bad = 0
    r = 0
    if mode == "run":
        def reader():
            for line in sys.stdin:
                if line.strip() == "stop":
                    break
                if line.strip() == "burst":
                    burst.set()
            stop.set()
        threading.Thread(target=reader, daemon=True).start()
        print("ready", flush=True)
    while (r < limit) if limit >= 0 else not stop.is_set():
        if burst.is_set():
            # 2 GB in blocks the interpreter's own malloc makes (not part of the rounds)
            for i in range(20000):
                bytearray(100000)
            burst.clear()
            print("burst done", flush=True)
        s, b = round_work(r, keep)
        total += s
        bad += b
        r += 1
    print("rounds=%d sum=%d bad=%d" % (r, total, bad), flush=True)


main()
