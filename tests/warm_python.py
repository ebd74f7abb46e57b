"""A warm interpreter: `python SCRIPT ARGS`, `python -c CODE ARGS` and `python -m MODULE ARGS` run as
processes forked from a server that has already imported the heavy libraries they import (pandas,
scipy, matplotlib, seaborn; snakemake), instead of processes that import them again.

Each call is still a process of its own: its interpreter (a venv's python is the venv's), its
working directory, its environment, its sys.argv and sys.path (as the interpreter would set them),
stdin, stdout and stderr (the caller's, or files it reads back), its exit status (an uncaught
exception: 1, as Python's). Random generators already imported are seeded again, as a fresh
process's would be. What stays the server's: the libraries named in `preload`, imported once
(never a dlbench module: the server refuses), and the hash seed.

The client (`run`) takes subprocess.run's arguments the tests use; the server is this file, run by
the interpreter of the calls (`python warm_python.py MODULE...`), one per interpreter and worker.
"""
import atexit
import json
import locale
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading

SERVED_FLAGS = ("-c", "-m")
CLIENT_ENV = "WARM_PYTHON_CLIENT_ENV"  # the client's environment, to tell what the interpreter's wrapper exports


# ---- the server (in the interpreter of the calls) ------------------------------------------------

def _receive(conn):
    """A request and the three descriptors sent with it (stdin, stdout, stderr)."""
    head, fds, _, _ = socket.recv_fds(conn, 8, 3)
    size = struct.unpack("!Q", head)[0]
    body = b""
    while len(body) < size:
        chunk = conn.recv(size - len(body))
        if not chunk:
            raise EOFError("the client closed the connection mid-request")
        body += chunk
    return json.loads(body), fds


def _exit_code(code):
    """The status Python gives a SystemExit's code (printing what is not a number, as it does)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _run_program(request, fds, base_path, listener, control):
    """In the forked process: become the process `python ARGS` would start, run it, exit."""
    import builtins
    import runpy
    import types

    listener.close()
    os.close(control)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    os.environ.update(request["exports"])
    args = request["args"]
    pythonpath = [os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if args[0] == "-c":
        first, sys.argv = "", ["-c", *args[2:]]
    elif args[0] == "-m":
        first, sys.argv = os.getcwd(), [args[1], *args[2:]]  # runpy sets argv[0] to the module's file
    else:
        first, sys.argv = os.path.dirname(os.path.realpath(args[0])), list(args)
    sys.path[:] = [first, *pythonpath, *base_path]
    import random
    random.seed()
    if "numpy.random" in sys.modules:
        sys.modules["numpy.random"].seed()
    code = 0
    try:
        if args[0] == "-c":
            main = sys.modules["__main__"] = types.ModuleType("__main__")
            main.__builtins__ = builtins
            exec(compile(args[1], "<string>", "exec"), main.__dict__)
        elif args[0] == "-m":
            runpy.run_module(args[1], run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(args[0], run_name="__main__")
    except SystemExit as stop:
        code = _exit_code(stop.code)
    except BaseException as error:  # noqa: BLE001 (what the interpreter does with an uncaught exception)
        trace = error.__traceback__
        while trace is not None and trace.tb_frame.f_code.co_filename in (__file__, runpy.__file__, "<frozen runpy>"):
            trace = trace.tb_next  # the traceback starts in the program, as the interpreter's does
        sys.excepthook(type(error), error.with_traceback(trace), trace)
        code = 1
    try:
        threading._shutdown()  # the interpreter waits for non-daemon threads
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:  # noqa: BLE001
        code = code or 120
    os._exit(code)


def _serve(conn, base_path, listener, control, exports):
    """In a forked process: run the request in a process of its own, send back its exit status."""
    request, fds = _receive(conn)
    request["exports"] = exports
    pid = os.fork()
    if pid == 0:
        conn.close()
        _run_program(request, fds, base_path, listener, control)
    for fd in fds:
        os.close(fd)
    _, status = os.waitpid(pid, 0)
    conn.sendall(struct.pack("!i", os.waitstatus_to_exitcode(status)))
    os._exit(0)


def serve(address, preload):
    """Import `preload`, then fork a process for each request on the socket at `address`, until the
    client closes this process's stdin."""
    import importlib
    import selectors

    # What a venv's wrapper (scripts/build_venv.py: `export NAME=value`, then exec) set: set in every call too
    client = json.loads(os.environ.pop(CLIENT_ENV))
    exports = {name: value for name, value in os.environ.items() if client.get(name) != value}
    if removed := sorted(set(client) - set(os.environ)):
        raise SystemExit(f"the interpreter's wrapper unset {removed}: warm_python does not emulate that")
    own = [os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    base_path = [p for p in sys.path[1:] if p not in own]  # without this file's folder and PYTHONPATH
    for name in preload:
        importlib.import_module(name)
    if leaked := sorted(name for name in sys.modules if name == "dlbench" or name.startswith("dlbench.")):
        raise SystemExit(f"preloading {preload} imported {leaked}: the calls would not import their own")
    backend = sys.modules.get("matplotlib")
    if backend is not None and backend.rcParams._get_backend_or_none() is not None:
        raise SystemExit("preloading chose matplotlib's backend: each call must choose its own")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(address)
    listener.listen(8)
    control = os.dup(0)
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    sys.stdout.flush()
    sys.stderr.flush()
    print("ready", flush=True)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    selector.register(control, selectors.EVENT_READ)
    while True:
        ready = {key.fileobj for key, _ in selector.select(timeout=1.0)}
        while True:  # reap the finished request handlers
            try:
                if os.waitpid(-1, os.WNOHANG)[0] == 0:
                    break
            except ChildProcessError:
                break
        if control in ready and not os.read(control, 1):
            return
        if listener in ready:
            conn, _ = listener.accept()
            if os.fork() == 0:
                selector.close()
                _serve(conn, base_path, listener, control, exports)
            conn.close()


# ---- the client (in the tests' process) ----------------------------------------------------------

_SERVERS = {}
_LOCK = threading.Lock()


class _Server:
    def __init__(self, python, preload):
        self.folder = tempfile.mkdtemp(prefix="warm-python-")
        self.address = os.path.join(self.folder, "socket")
        self.process = subprocess.Popen([python, __file__, self.address, *preload], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True,
                                        env={**os.environ, CLIENT_ENV: json.dumps(dict(os.environ))})
        if self.process.stdout.readline().strip() != "ready":
            self.process.wait()
            raise RuntimeError(f"the warm {python} (preloading {', '.join(preload)}) did not start")

    def call(self, args, cwd, env, stdin, stdout, stderr):
        body = json.dumps({"args": args, "cwd": cwd, "env": env}).encode()
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.connect(self.address)
            socket.send_fds(conn, [struct.pack("!Q", len(body))], [stdin, stdout, stderr])
            conn.sendall(body)
            status = b""
            while len(status) < 4:
                chunk = conn.recv(4 - len(status))
                if not chunk:
                    raise RuntimeError("the warm interpreter's request handler ended without a status")
                status += chunk
        return struct.unpack("!i", status)[0]


def run(cmd, *, preload, capture_output=False, text=False, check=False, cwd=None, env=None):
    """subprocess.run(cmd, ...) where cmd is [python, SCRIPT | -c CODE | -m MODULE, ARGS...], run by
    that python's warm server (started with `preload` imported on the first call)."""
    python, *args = map(str, cmd)
    if not args or (args[0].startswith("-") and args[0] not in SERVED_FLAGS) or (args[0] in SERVED_FLAGS and len(args) < 2):
        raise ValueError(f"warm_python runs a script, -c CODE or -m MODULE: not {cmd}")
    key = (python, tuple(preload))
    with _LOCK:
        if key not in _SERVERS:
            _SERVERS[key] = _Server(python, preload)
        server = _SERVERS[key]
    env = dict(os.environ if env is None else env)
    cwd = os.path.abspath(os.fspath(cwd) if cwd is not None else os.getcwd())
    if not capture_output:
        returncode = server.call(args, cwd, env, 0, 1, 2)
        out = err = None
    else:
        with tempfile.TemporaryFile() as out_file, tempfile.TemporaryFile() as err_file:
            returncode = server.call(args, cwd, env, 0, out_file.fileno(), err_file.fileno())
            out_file.seek(0)
            err_file.seek(0)
            out, err = out_file.read(), err_file.read()
        if text:  # as subprocess decodes: the locale's encoding, universal newlines
            encoding = locale.getpreferredencoding(False)
            out, err = (data.decode(encoding).replace("\r\n", "\n").replace("\r", "\n") for data in (out, err))
    proc = subprocess.CompletedProcess(list(cmd), returncode, out, err)
    if check:
        proc.check_returncode()
    return proc


def _stop_servers():
    for server in _SERVERS.values():
        server.process.stdin.close()
        server.process.wait()
        shutil.rmtree(server.folder, ignore_errors=True)


atexit.register(_stop_servers)


if __name__ == "__main__":
    serve(sys.argv[1], sys.argv[2:])
