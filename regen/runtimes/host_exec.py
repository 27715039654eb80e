"""The process a host (C++) artifact runs in: never the judge's.

Started by regen/runtimes/cpu.py as `python -I -S host_exec.py CONTROL_FD ARENA_FD`, a plain
interpreter with the standard library only. It loads the artifact when told to and calls its
extern "C" functions with pointers into the arena, a memfd the judge also maps; buffers are copied
in and out by the judge, which also keeps every clock. Whatever the artifact does to this process
(patch its interpreter, forge its state) stays here: the judge's memory, timer and result are in
another process. Protocol, one JSON line each way:

    -> hello                               (before anything untrusted is loaded)
    <- {"op": "load", "path": P}           -> ready | err MESSAGE
    <- {"op": "map", "size": N}            -> ok          (the arena grew to N bytes)
    <- {"op": "run", "calls": [[KERNEL, [[KIND, VALUE], ...]], ...]}  -> ok | err MESSAGE
    <- {"op": "ping"}                      -> ok          (round-trip calibration)

KIND is "ptr" (VALUE: a byte offset into the arena) or a scalar type (int32 int64 float32 float64).
The process dies with its parent (PR_SET_PDEATHSIG: no destructor of the artifact runs after the
judge has finished) and on end of input. While the artifact's code runs (load and calls), any
Python audit event (an artifact reaching this interpreter through the C API: compile, exec,
import, ...) ends the process at once with status PYTHON_API_STATUS; the judge reports it as the
`python-api` guard. A tripwire, not a wall: the wall is the process boundary.
"""

import ctypes
import json
import mmap
import os
import signal
import socket
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
    reply("hello")
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
