"""The process a host (C++) artifact runs in: never the judge's.

Started by regen/runtimes/cpu.py as `python -I -S host_exec.py CONTROL_FD ARENA_FD`, a plain
interpreter with the standard library only. It loads the artifact when told to and calls its
extern "C" functions with pointers into the arena, a memfd the judge also maps; buffers are copied
in and out by the judge, which also keeps every clock. Whatever the artifact does to this process
(patch its interpreter, forge its state) stays here: the judge's memory, timer and result are in
another process. Protocol, one JSON line each way:

    -> hello CONFINEMENT                   (before anything untrusted is loaded)
    <- {"op": "load", "path": P}           -> ready | err MESSAGE
    <- {"op": "map", "size": N}            -> ok          (the arena grew to N bytes)
    <- {"op": "run", "calls": [[KERNEL, [[KIND, VALUE], ...]], ...]}  -> ok | err MESSAGE
    <- {"op": "ping"}                      -> ok          (round-trip calibration)

KIND is "ptr" (VALUE: a byte offset into the arena) or a scalar type (int32 int64 float32 float64).
The process dies with its parent (PR_SET_PDEATHSIG: no destructor of the artifact runs after the
judge has finished) and on end of input. While the artifact's code runs (load and calls), any
Python audit event (an artifact reaching this interpreter through the C API: compile, exec,
import, ...) ends the process at once with status PYTHON_API_STATUS; the judge reports it as the
`python-api` guard. A tripwire, not a wall: the wall is the process boundary, and on x86-64 Linux a
seccomp filter (installed before the artifact loads, kept by every thread it starts) that refuses
what could reach past it: other processes' memory (ptrace, process_vm_*, pidfd_getfd), new
processes (fork, vfork, clone without CLONE_THREAD, clone3, exec), leaving the judge's process
group or the death signal it dies by (setsid, setpgid, PR_SET_PDEATHSIG), signals to anyone else, files
opened for writing and changes to the file system, sockets, io_uring, namespaces and mounts. The
artifact keeps what a kernel needs: memory, threads, reading files, its own signals. CONFINEMENT is
"seccomp" or "unconfined: WHY".
"""

import ctypes
import errno
import json
import mmap
import os
import platform
import signal
import socket
import struct
import sys

_SCALARS = {"int32": ctypes.c_int32, "int64": ctypes.c_int64, "float32": ctypes.c_float,
            "float64": ctypes.c_double}
_PR_SET_PDEATHSIG = 1
PYTHON_API_STATUS = 86
_armed = {"on": False, "allowed": ()}


def _tripwire(event, _args):
    if _armed["on"] and event not in _armed["allowed"]:
        os.write(2, f"host artifact used the Python interpreter: audit event {event!r}\n".encode())
        os._exit(PYTHON_API_STATUS)


def _artifact(allowed=()):
    """Arm the tripwire around the artifact's own code."""
    class _Window:
        def __enter__(self):
            _armed["allowed"], _armed["on"] = allowed, True

        def __exit__(self, *exc):
            _armed["on"] = False
    return _Window()


# x86-64 system call numbers refused with EPERM
_DENY = (
    101, 310, 311, 438, 434, 424, 440,       # ptrace process_vm_readv/writev pidfd_getfd/open/send_signal process_madvise
    57, 58, 59, 322,                         # fork vfork execve execveat
    200,                                     # tkill (tgkill and kill: own process only, below)
    109, 112,                                # setpgid setsid: stay in the group the judge kills
    41, 42, 43, 288, 49, 50, 53,             # socket connect accept accept4 bind listen socketpair
    83, 258, 82, 264, 316, 87, 263, 84,      # mkdir mkdirat rename renameat renameat2 unlink unlinkat rmdir
    88, 266, 86, 265, 76, 77, 85, 437,       # symlink symlinkat link linkat truncate ftruncate creat openat2
    90, 91, 268, 92, 93, 94, 260,            # chmod fchmod fchmodat chown fchown lchown fchownat
    425, 426, 427, 303, 304,                 # io_uring_* name_to_handle_at open_by_handle_at
    165, 166, 161, 155, 272, 308, 321, 298,  # mount umount2 chroot pivot_root unshare setns bpf perf_event_open
)
_OPEN_WRITE = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_CLONE_THREAD = 0x00010000


def _filter(pid: int) -> bytes:
    """The seccomp BPF program (struct sock_filter[]): see the module docstring."""
    ld, jeq, jset, ret = 0x20, 0x15, 0x45, 0x06
    allow, kill = 0x7FFF0000, 0x80000000
    eperm, enosys = 0x00050000 | errno.EPERM, 0x00050000 | errno.ENOSYS
    nr, arch = 0, 4

    def arg(i):
        return 16 + 8 * i  # low 32 bits (little endian)

    prog = [(ld, 0, 0, arch), (jeq, 1, 0, 0xC000003E), (ret, 0, 0, kill), (ld, 0, 0, nr),
            (jset, 0, 1, 0x40000000), (ret, 0, 0, eperm)]  # x32 system calls
    for n in _DENY:
        prog += [(jeq, 0, 1, n), (ret, 0, 0, eperm)]
    prog += [(jeq, 0, 1, 435), (ret, 0, 0, enosys)]  # clone3: glibc falls back to clone
    for n, i in ((2, 1), (257, 2)):  # open(path, flags), openat(dir, path, flags): no writing
        prog += [(jeq, 0, 4, n), (ld, 0, 0, arg(i)), (jset, 0, 1, _OPEN_WRITE), (ret, 0, 0, eperm),
                 (ld, 0, 0, nr)]
    prog += [(jeq, 0, 4, 56), (ld, 0, 0, arg(0)), (jset, 1, 0, _CLONE_THREAD), (ret, 0, 0, eperm),
             (ld, 0, 0, nr)]  # clone: threads only
    prog += [(jeq, 0, 4, 157), (ld, 0, 0, arg(0)), (jeq, 0, 1, 1), (ret, 0, 0, eperm),
             (ld, 0, 0, nr)]  # prctl(PR_SET_PDEATHSIG, ...): it dies with the judge
    for n in (62, 234):  # kill(pid, sig), tgkill(tgid, tid, sig): this process only
        prog += [(jeq, 0, 4, n), (ld, 0, 0, arg(0)), (jeq, 1, 0, pid), (ret, 0, 0, eperm),
                 (ld, 0, 0, nr)]
    prog.append((ret, 0, 0, allow))
    return b"".join(struct.pack("=HBBI", *ins) for ins in prog)


def _confine() -> str:
    if sys.platform != "linux" or platform.machine() != "x86_64":
        return f"unconfined: no seccomp filter for {sys.platform}/{platform.machine()}"
    libc = ctypes.CDLL(None, use_errno=True)
    program = ctypes.create_string_buffer(_filter(os.getpid()))

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = SockFprog(len(program.raw) // 8, ctypes.addressof(program))
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        return f"unconfined: PR_SET_NO_NEW_PRIVS failed ({os.strerror(ctypes.get_errno())})"
    if libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) != 0:  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
        return f"unconfined: seccomp refused ({os.strerror(ctypes.get_errno())})"
    return "seccomp"


def main(argv):
    control = socket.socket(fileno=int(argv[1]))
    arena_fd = int(argv[2])
    try:
        ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (AttributeError, OSError):
        pass
    reader, writer = control.makefile("rb"), control.makefile("wb")

    def reply(text):
        writer.write(text.encode() + b"\n")
        writer.flush()

    lib, funcs, arena, base = None, {}, None, 0
    sys.addaudithook(_tripwire)
    reply(f"hello {_confine()}")
    for line in reader:
        msg = json.loads(line)
        op = msg["op"]
        try:
            if op == "load":
                with _artifact(allowed=("ctypes.dlopen",)):  # load-time constructors run here
                    lib = ctypes.CDLL(os.path.abspath(msg["path"]), mode=ctypes.RTLD_LOCAL)
                reply("ready")
            elif op == "map":
                arena = mmap.mmap(arena_fd, msg["size"])  # the old map stays valid until collected
                base = ctypes.addressof(ctypes.c_char.from_buffer(arena))
                reply("ok")
            elif op == "run":
                for kernel, args in msg["calls"]:
                    fn = funcs.get(kernel)
                    if fn is None:
                        try:
                            fn = getattr(lib, kernel)
                        except AttributeError:
                            raise LookupError(f"kernel {kernel!r} is not exported by the artifact "
                                              '(missing extern "C"?)') from None
                        fn.restype = None
                        funcs[kernel] = fn
                    call = [ctypes.c_void_p(base + v) if k == "ptr" else _SCALARS[k](v)
                            for k, v in args]
                    with _artifact():
                        fn(*call)
                reply("ok")
            elif op == "ping":
                reply("ok")
            else:
                reply(f"err unknown request {op!r}")
        except Exception as exc:  # noqa: BLE001 - reported to the judge, which fails the case
            reply(f"err {type(exc).__name__}: {exc}".replace("\n", " "))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
