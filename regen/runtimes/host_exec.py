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
`python-api` guard. A tripwire, not a wall: the wall is the process boundary, and on x86-64 Linux
a seccomp allowlist (ALLOWLIST below; installed before the artifact loads, kept by every thread it
starts) of what a compute kernel, glibc, libgomp and this interpreter need: memory, threads (clone
with CLONE_THREAD only), futex, clocks and sleeps, its own signals, reading open descriptors and
read-only opens, the control socket. Any other call, or a listed one with other arguments (a signal
to another process, a handler installed, a new process, a file opened for writing), kills the
process with SIGSYS, which the judge reports as the `sandbox` guard. Once the artifact is loaded
a second filter refuses opening files and kills on executable memory. Before the first one the
process starts one thread (so glibc's own signal handlers exist), drops its capabilities, its core
limit and raises its OOM score. CONFINEMENT is "seccomp" or "unconfined: WHY" (other
architectures: no filter; the threads guard and the process boundary still hold).
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


# -- the seccomp allowlist (x86-64) -----------------------------------------------------------------
# What an honest compute kernel, glibc, libgomp and this interpreter need once the filter is in
# place (measured with strace on every committed host kernel). Anything else kills the process
# (SIGSYS: the judge reports the `sandbox` guard), so a forbidden call cannot be retried or probed.
_KILL, _ALLOW = 0x80000000, 0x7FFF0000  # SECCOMP_RET_KILL_PROCESS, SECCOMP_RET_ALLOW
_ERRNO = 0x00050000
_AUDIT_ARCH_X86_64 = 0xC000003E
_CLONE_THREAD, _CLONE_VM = 0x00010000, 0x00000100
_OPEN_WRITE = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_PROT_EXEC = 0x4
_F_GETFD, _F_GETFL, _F_DUPFD_CLOEXEC = 1, 3, 1030
_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 22, 2

# name: number, for the report and the tests (docs/oracle.md lists them too)
SYSCALLS = {
    "read": 0, "write": 1, "close": 3, "fstat": 5, "lseek": 8, "mmap": 9, "mprotect": 10,
    "munmap": 11, "brk": 12, "rt_sigaction": 13, "rt_sigprocmask": 14, "rt_sigreturn": 15,
    "pread64": 17, "readv": 19, "sched_yield": 24, "mremap": 25, "mincore": 27, "madvise": 28,
    "nanosleep": 35, "getpid": 39, "sendto": 44, "recvfrom": 45, "clone": 56, "exit": 60,
    "kill": 62, "uname": 63, "fcntl": 72, "gettimeofday": 96, "getrlimit": 97, "sysinfo": 99,
    "prctl": 157, "gettid": 186, "time": 201, "futex": 202, "sched_getaffinity": 204,
    "restart_syscall": 219, "clock_gettime": 228, "clock_getres": 229, "clock_nanosleep": 230,
    "exit_group": 231, "tgkill": 234, "openat": 257, "newfstatat": 262, "set_robust_list": 273,
    "prlimit64": 302, "getcpu": 309, "getrandom": 318, "statx": 332, "rseq": 334, "clone3": 435,
}


def _lo(i):
    return 16 + 8 * i  # offset of argument i's low 32 bits in struct seccomp_data (little endian)


def _hi(i):
    return _lo(i) + 4


# conditions on a call's arguments: each is (offset, test, value); all must hold, else the process
# is killed. test: "eq" (equal), "none" (no bit of value set), "all" (every bit of value set),
# "in" (one of the values)
ALLOWLIST = {
    # memory
    "brk": (), "mmap": (), "munmap": (), "mprotect": (), "mremap": (), "madvise": (), "mincore": (),
    # threads (never a new process), their start-up and their waits
    "clone": ((_lo(0), "all", _CLONE_THREAD | _CLONE_VM),),
    "set_robust_list": (), "rseq": (), "futex": (), "sched_yield": (), "sched_getaffinity": (),
    "rt_sigprocmask": (), "rt_sigreturn": (), "restart_syscall": (), "gettid": (), "getpid": (),
    "exit": (), "exit_group": (),
    # look up handlers, never install one (glibc's own are installed before the filter)
    "rt_sigaction": ((_lo(1), "eq", 0), (_hi(1), "eq", 0)),
    # signals: this process only
    "kill": ((_lo(0), "eq", "PID"),),
    "tgkill": ((_lo(0), "eq", "PID"),),
    # clocks and sleeps
    "clock_gettime": (), "clock_getres": (), "gettimeofday": (), "time": (), "nanosleep": (),
    "clock_nanosleep": (),
    # reading what is already open (the control socket, the arena, the loader's files); files
    # opened for reading only (the dynamic loader and libgomp at load; after it, refused)
    "read": (), "pread64": (), "readv": (), "lseek": (), "close": (), "fstat": (), "newfstatat": (),
    "statx": (), "openat": ((_lo(2), "none", _OPEN_WRITE),),
    "fcntl": ((_lo(1), "in", (_F_GETFD, _F_GETFL, _F_DUPFD_CLOEXEC)),),  # no F_SETOWN: no SIGIO
    # the control socket: the replies (to the connected peer only) and stderr, stdout
    "recvfrom": (), "sendto": ((_lo(4), "eq", 0), (_hi(4), "eq", 0)),
    "write": ((_lo(0), "in", (1, 2)),),
    # facts about this process and machine
    "getrlimit": (), "prlimit64": ((_lo(0), "eq", 0), (_lo(2), "eq", 0), (_hi(2), "eq", 0)),
    "uname": (), "sysinfo": (), "getcpu": (), "getrandom": (),
    # the second (after-load) filter only
    "prctl": ((_lo(0), "eq", _PR_SET_SECCOMP), (_lo(1), "eq", _SECCOMP_MODE_FILTER)),
}
# refused with an error instead: glibc's pthread_create tries clone3 (whose flags a filter cannot
# read) and falls back to clone on ENOSYS
ERRORS = {"clone3": errno.ENOSYS}
# added once the artifact is loaded: no more files (EPERM: glibc's probes fail gracefully) and no
# new executable memory (no code loaded or generated after the checks of judge/hostcode.py)
AFTER_LOAD = {"openat": ("errno", errno.EPERM),
              "mmap": ("kill-if", (_lo(2), _PROT_EXEC)),
              "mprotect": ("kill-if", (_lo(2), _PROT_EXEC))}


def _program(rules) -> bytes:
    """A classic BPF program (struct sock_filter[]) from a list of (number, block) where a block
    is the instructions run for that call; each block ends in a return."""
    ld, jeq, jset, ret = 0x20, 0x15, 0x45, 0x06
    prog = [(ld, 0, 0, 4), (jeq, 1, 0, _AUDIT_ARCH_X86_64), (ret, 0, 0, _KILL), (ld, 0, 0, 0),
            (jset, 0, 1, 0x40000000), (ret, 0, 0, _KILL)]  # x32 system calls
    for nr, block in rules:
        prog += [(jeq, 0, len(block), nr)] + block
    return prog


def _checks(conds, pid: int, fail: int = _KILL) -> list:
    ld, jeq, jset, ret = 0x20, 0x15, 0x45, 0x06
    out = []
    for off, test, value in conds:
        value = pid if value == "PID" else value
        out.append((ld, 0, 0, off))
        if test == "eq":
            out += [(jeq, 1, 0, value), (ret, 0, 0, fail)]
        elif test == "none":
            out += [(jset, 0, 1, value), (ret, 0, 0, fail)]
        elif test == "all":
            out += [(0x54, 0, 0, value), (jeq, 1, 0, value), (ret, 0, 0, fail)]  # and #value
        else:  # "in"
            out += [(jeq, len(value) - i, 0, v) for i, v in enumerate(value)] + [(ret, 0, 0, fail)]
    return out


def _filter(pid: int) -> bytes:
    """The allowlist (see ALLOWLIST): a call not listed, or listed with arguments that fail its
    conditions, kills the process."""
    ret = 0x06
    rules = [(SYSCALLS[n], [(ret, 0, 0, _ERRNO | e)]) for n, e in ERRORS.items()]
    rules += [(SYSCALLS[n], _checks(c, pid) + [(ret, 0, 0, _ALLOW)]) for n, c in ALLOWLIST.items()]
    prog = _program(rules) + [(ret, 0, 0, _KILL)]
    return b"".join(struct.pack("=HBBI", *ins) for ins in prog)


def _after_load_filter() -> bytes:
    """Stacked on the allowlist once the artifact is loaded (the stricter verdict wins)."""
    ret = 0x06
    rules = []
    for name, (kind, arg) in AFTER_LOAD.items():
        if kind == "errno":
            rules.append((SYSCALLS[name], [(ret, 0, 0, _ERRNO | arg)]))
        else:
            off, bits = arg
            rules.append((SYSCALLS[name], _checks([(off, "none", bits)], 0) + [(ret, 0, 0, _ALLOW)]))
    prog = _program(rules) + [(ret, 0, 0, _ALLOW)]
    return b"".join(struct.pack("=HBBI", *ins) for ins in prog)


def _install(program: bytes, first: bool = True) -> str | None:
    libc = ctypes.CDLL(None, use_errno=True)
    buf = ctypes.create_string_buffer(program)

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = SockFprog(len(program) // 8, ctypes.addressof(buf))
    if first and libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS (kept by the next ones)
        return f"PR_SET_NO_NEW_PRIVS failed ({os.strerror(ctypes.get_errno())})"
    if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        return f"seccomp refused ({os.strerror(ctypes.get_errno())})"
    return None


def _prepare() -> None:
    """Before the filter: what this process will never be allowed to do again. glibc installs its
    own signal handlers (SIGCANCEL, SIGSETXID) when the first thread starts: start one now, so the
    artifact's threads need no rt_sigaction. No capabilities (as root they would open the judge's
    memory through /proc), no core files, and the first process the kernel kills when memory runs
    out."""
    import threading

    t = threading.Thread(target=int)
    t.start()
    t.join()
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    except (ImportError, ValueError, OSError):
        pass
    try:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("1000")
    except OSError:
        pass
    libc = ctypes.CDLL(None, use_errno=True)
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = (ctypes.c_uint32 * 6)()                 # effective, permitted, inheritable: none
    if hasattr(libc, "capset"):
        libc.capset(header, data)


def _confine() -> str:
    if sys.platform != "linux" or platform.machine() != "x86_64":
        return f"unconfined: no seccomp filter for {sys.platform}/{platform.machine()}"
    _prepare()
    problem = _install(_filter(os.getpid()))
    return f"unconfined: {problem}" if problem else "seccomp"


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
    confinement = _confine()
    reply(f"hello {confinement}")
    for line in reader:
        msg = json.loads(line)
        op = msg["op"]
        try:
            if op == "load":
                with _artifact(allowed=("ctypes.dlopen",)):  # load-time constructors run here
                    lib = ctypes.CDLL(os.path.abspath(msg["path"]), mode=ctypes.RTLD_LOCAL)
                if confinement == "seccomp":
                    problem = _install(_after_load_filter(), first=False)
                    if problem:
                        raise OSError(f"the after-load filter was refused: {problem}")
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
    os._exit(0)  # no interpreter shutdown: it would restore signal handlers, which the filter kills


if __name__ == "__main__":
    sys.exit(main(sys.argv))
