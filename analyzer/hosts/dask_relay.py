"""The Dask client of ``--scheduler`` in a process of its own: ``python -m xladiag.analyzer.hosts.dask_relay ADDR``.

A client in the analysing process would cost it the import of dask.distributed and its event loop, about
25 MB held for the whole run: a quarter of what a large host's own run takes, on top of the merge. So
the client lives in a relay process that imports none of xladiag's analysis. This process pickles each
call, the relay submits the bytes to the cluster as they are, a worker runs the call (on a thread its
profiler does not sample: :func:`run_unsampled`) and pickles the result, and the relay writes the bytes
back as each task ends. The relay never unpickles a call or a result.

Frames on the relay's stdin and stdout: an 8-byte length, then a pickle. In: ``(call id, call bytes)``;
end of input ends the relay. Out: first ``("ready", None)`` or ``("error", message)``, then per call
``(call id, result bytes, None)``, or ``(call id, None, why the task failed)``.

An in-process cluster (``inproc://``) is reachable from this process only: its client runs here.
"""

from __future__ import annotations

import importlib
import itertools
import os
import pickle
import struct
import subprocess
import sys
import threading
from concurrent.futures import Executor, Future

from ...errors import InputError, UsageError

_LENGTH = struct.Struct("<Q")
NEEDS_DASK = "--scheduler needs dask.distributed: pip install 'xladiag[dask]'"


def run_unsampled(fn, *args):
    """``fn(*args)`` on a thread of its own, this one waiting for it. A Dask worker samples the stacks of the
    threads running its tasks every 10 ms and keeps a call tree per second of work, the last 1000 of them
    (``distributed.worker.profile``, on by default): our deep pandas stacks kept that way cost about 0.5 MB per
    busy second, 24 MB of a worker's peak on 64 hosts and hundreds of MB on a cluster that serves many runs.
    Sampled here, a task is one short stack: the wait."""
    done: Future = Future()

    def work():
        try:
            done.set_result(fn(*args))
        except BaseException as exc:  # raised in the task's own thread below, as if fn had run there
            done.set_exception(exc)

    thread = threading.Thread(target=work, name="xladiag-host")
    thread.start()
    thread.join()
    return done.result()


def _run(call: bytes) -> bytes:
    fn, args = pickle.loads(call)  # imports fn's module on a worker's first call: unsampled too
    try:
        return pickle.dumps(("ok", fn(*args)), protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:  # noqa: BLE001 (handed back to the caller, raised there)
        try:
            return pickle.dumps(("raise", exc), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:  # noqa: BLE001 (an exception that does not pickle: its words)
            return pickle.dumps(("raise", InputError(f"{type(exc).__name__}: {exc}")))


def remote_call(call: bytes) -> bytes:
    """On a Dask worker: the pickled ``(fn, args)`` run, its result (or what it raised) pickled."""
    return run_unsampled(_run, call)


def _write(stream, data: bytes) -> None:
    stream.write(_LENGTH.pack(len(data)))
    stream.write(data)
    stream.flush()


def _read(stream) -> bytes | None:
    """The next frame, None at the end of the stream (a frame cut short is an end too)."""
    head = stream.read(_LENGTH.size)
    if len(head) < _LENGTH.size:
        return None
    data = stream.read(_LENGTH.unpack(head)[0])
    return data if len(data) == _LENGTH.unpack(head)[0] else None


class RelayExecutor(Executor):
    """An Executor whose calls run on the Dask cluster at ``address``, through a relay process."""

    def __init__(self, address: str):
        try:
            self._proc = subprocess.Popen([sys.executable, "-m", __name__, address], stdin=subprocess.PIPE,
                                          stdout=subprocess.PIPE)
        except OSError as exc:
            raise UsageError(f"--scheduler {address}: cannot start the Dask client process: {exc}") from None
        first = _read(self._proc.stdout)
        kind, message = pickle.loads(first) if first is not None else ("error", None)
        if kind != "ready":
            self._proc.stdin.close()
            code = self._proc.wait()
            raise UsageError(message or f"--scheduler {address}: the Dask client process ended (exit {code})")
        self._pending: dict[int, Future] = {}
        self._ended: str | None = None  # why no more results come (the relay is gone), once it is
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._results, name="xladiag-dask-results", daemon=True)
        self._reader.start()

    def submit(self, fn, /, *args):
        future: Future = Future()
        call_id = next(self._ids)
        call = pickle.dumps((fn, args), protocol=pickle.HIGHEST_PROTOCOL)
        with self._lock:
            if self._ended is not None:
                future.set_exception(InputError(self._ended))
                return future
            self._pending[call_id] = future
            try:
                _write(self._proc.stdin, pickle.dumps((call_id, call), protocol=pickle.HIGHEST_PROTOCOL))
            except OSError:  # the relay is gone: the reader thread fails every pending call
                pass
        return future

    def _results(self) -> None:
        while (frame := _read(self._proc.stdout)) is not None:
            call_id, data, failed = pickle.loads(frame)
            with self._lock:
                future = self._pending.pop(call_id)
            if failed is not None:
                future.set_exception(InputError(f"a Dask task failed: {failed}"))
                continue
            try:
                kind, value = pickle.loads(data)
            except Exception as exc:  # noqa: BLE001 (e.g. a worker with another xladiag: said, never a hang)
                kind, value = "raise", InputError(f"a Dask worker's result could not be read here: {exc}")
            del data, frame
            (future.set_result if kind == "ok" else future.set_exception)(value)
        code = self._proc.wait()
        with self._lock:
            self._ended = f"the Dask client process ended (exit {code}) before every host was read"
            left, self._pending = list(self._pending.values()), {}
        for future in left:
            future.set_exception(InputError(self._ended))

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        try:
            self._proc.stdin.close()
        except OSError:
            pass
        try:
            self._proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._reader.join()


def _serve(address: str) -> int:
    frames_out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything printed (Dask, a library) goes to stderr, never into the frames
    frames_in = sys.stdin.buffer
    try:
        from distributed import Client
    except ImportError:
        _write(frames_out, pickle.dumps(("error", NEEDS_DASK)))
        return 2
    try:
        client = Client(address, timeout="10s")
    except (OSError, TimeoutError, ValueError) as exc:
        _write(frames_out, pickle.dumps(("error", f"--scheduler {address}: cannot reach the Dask scheduler: {exc}")))
        return 2
    _write(frames_out, pickle.dumps(("ready", None)))
    # By its module's name, not __main__'s: the workers import it, not a copy of its code sent by value.
    remote = importlib.import_module(__spec__.name).remote_call
    lock, live = threading.Lock(), {}

    def ended(future) -> None:  # on a thread of the client's: the bytes back as they are
        call_id, _ = live.pop(future.key)  # the last reference: the cluster forgets the result once sent
        try:
            frame = (call_id, future.result(), None)
        except BaseException as exc:  # noqa: BLE001 (a worker died, the task was lost: said to the caller)
            frame = (call_id, None, f"{type(exc).__name__}: {exc}")
        data = pickle.dumps(frame, protocol=pickle.HIGHEST_PROTOCOL)
        with lock:
            _write(frames_out, data)

    try:
        while (frame := _read(frames_in)) is not None:
            call_id, call = pickle.loads(frame)
            future = client.submit(remote, call, pure=False)
            live[future.key] = (call_id, future)  # held until its result is sent (a dropped future is cancelled)
            future.add_done_callback(ended)
    except KeyboardInterrupt:
        pass
    finally:
        client.close()
    return 0


if __name__ == "__main__":
    sys.exit(_serve(sys.argv[1]))
