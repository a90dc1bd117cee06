# SPDX-License-Identifier: MIT
"""card_attacker.py: a hostile app on a time-sliced card, run by acceld as
an app's command (test_timeslice_runtime.py, CardLedgerAttackTest). It
reads its own shim config (ACCEL_CONFIG), gets hold of the card's ledger
the way any process of an app bound to the card can, and tries to take it
from the other apps: cut it short (their mappings would fault: SIGBUS),
grow it, and seal it against their writes. One line per try on stdout
("truncate: EPERM", "seal-write: ok", ...), then it touches FLAG (argv[1])
and sleeps until stopped.

The card ledger is either a file (the config's path, before issue cardled:
opened for writing, as its ACL let every app of the card) or the sealed
memfd the device's broker hands an admitted process ("L", SCM_RIGHTS):
this process connects and says hello as its app, as the shim does."""
import errno
import fcntl
import os
import socket
import sys
import time

F_ADD_SEALS = 1033
F_GET_SEALS = 1034
F_SEAL_WRITE = 0x0008


def out(*a):
    print(*a, flush=True)


def attempt(name, fn):
    try:
        fn()
        out("%s: ok" % name)
    except OSError as e:
        out("%s: %s" % (name, errno.errorcode.get(e.errno, e.errno)))


def card_of_config():
    with open(os.environ["ACCEL_CONFIG"]) as f:
        for line in f:
            w = line.split()
            if len(w) >= 4 and w[0] == "timeslice":
                return w[2], w[3]
    return None, None


def card_from_broker(sock):
    c = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    c.settimeout(10)
    c.connect(sock)
    c.send(("H 1 %s" % os.environ.get("ACCEL_APP", "")).encode())
    while True:
        msg, fds, _, _ = socket.recv_fds(c, 256, 4)
        if msg[:1] == b"L" and fds:
            for extra in fds[1:]:
                os.close(extra)
            return c, fds[0]
        for x in fds:
            os.close(x)
        if not msg or msg[:1] == b"N":
            raise SystemExit("no card ledger from the broker: %r" % msg)


def main():
    sock, card = card_of_config()
    out("card %s" % card)
    keep = None
    if card is None:
        raise SystemExit("no timeslice line in the config")
    if card.startswith("/"):
        fd = os.open(card, os.O_RDWR)
    else:
        keep, fd = card_from_broker(sock)
        out("seals %d" % fcntl.fcntl(fd, F_GET_SEALS))
    size = os.fstat(fd).st_size
    attempt("seal-write", lambda: fcntl.fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE))
    attempt("grow", lambda: os.ftruncate(fd, size + 4096))
    attempt("truncate", lambda: os.ftruncate(fd, 0))
    out("size %d -> %d" % (size, os.fstat(fd).st_size))
    with open(sys.argv[1], "w") as f:
        f.write("done\n")
    while True:
        time.sleep(1)
    del keep


if __name__ == "__main__":
    main()
