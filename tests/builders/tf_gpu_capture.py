"""A TensorFlow GPU capture without XLA: TF ops as CUDA kernels, no HLO op, module or program anywhere.

The shape of a real TF capture xprof reads as input-bound: the host's training loop marks each step with a
root TraceMe (``tf.profiler.experimental.Trace("train", _r=1)``: stat ``_r``, no ``step_num``), inside which
the host waits ``loader_ps`` for the next batch (``IteratorGetNext``), then launches the step's kernels
(``cudaLaunchKernel`` with the kernel's ``correlation_id``). GPU 0 runs the model's kernels, GPU 1 a copy per
step, GPU 2's plane has no event (a card of the machine this process did not use).

``expected``: the step (the marker's span), the device busy time per step and the host lead before launch.
"""

from __future__ import annotations

from pathlib import Path

from xladiag.parsers.xspace_schema import XPlane

from .xspace_encoder import PS_PER_US, _field_bytes, _StatTable

NS = 1000
KERNELS = (("volta_sgemm_128x64_nn", 1500), ("Eigen::internal::EigenMetaKernel", 400),
           ("cudnn::bn_fw_tr_1C11_kernel_NCHW", 600), ("volta_sgemm_64x64_tn", 1500))  # name, us


class TfGpuCapture:
    def __init__(self, *, steps: int = 4, step_ps: int = 21_000 * PS_PER_US, loader_ps: int = 15_000 * PS_PER_US,
                 marker: str = "train", root: bool = True, host: str = "tf-gpu-host"):
        self.steps, self.step_ps, self.loader_ps, self.marker, self.root, self.host = (
            steps, step_ps, loader_ps, marker, root, host)

    def _device(self, index: int, kernels: list) -> bytes:
        plane = XPlane(id=10 + index, name=f"/device:GPU:{index}".encode())
        stats = _StatTable(plane, False)
        for name, value in (("device_vendor", "Nvidia"), ("device_model", "H100 80GB HBM3"),
                            ("compute_cap_major", 9), ("compute_cap_minor", 0), ("core_count", 132),
                            ("memory_bandwidth", 3.35e12), ("memory_size", 85_520_809_984)):
            stats.set(plane.stats.add(), name, value)
        if kernels:
            line = plane.lines.add(id=7, name=b"Stream #7(Kernel)", timestamp_ns=0)
            names: dict[str, int] = {}
            for name, start, dur, corr in kernels:
                mid = names.setdefault(name, len(names) + 1)
                plane.event_metadata[mid].id, plane.event_metadata[mid].name = mid, name.encode()
                event = line.events.add(metadata_id=mid, offset_ps=start, duration_ps=dur)
                stats.set(event.stats.add(), "correlation_id", corr)
        return plane.SerializeToString()

    def _host(self, host_events: list) -> bytes:
        plane = XPlane(id=1, name=b"/host:CPU")
        stats = _StatTable(plane, False)
        line = plane.lines.add(id=100, name=b"python", timestamp_ns=0)
        names: dict[str, int] = {}
        for name, start, dur, event_stats in sorted(host_events, key=lambda e: (e[1], -e[2])):
            mid = names.setdefault(name, len(names) + 1)
            plane.event_metadata[mid].id, plane.event_metadata[mid].name = mid, name.encode()
            event = line.events.add(metadata_id=mid, offset_ps=start, duration_ps=dur)
            for stat_name, value in event_stats.items():
                stats.set(event.stats.add(), stat_name, value)
        return plane.SerializeToString()

    def build(self) -> tuple[bytes, dict]:
        host, gpu0, gpu1 = [], [], []
        corr = 1
        t0 = 1_000 * PS_PER_US
        busy_ps = sum(us for _, us in KERNELS) * PS_PER_US
        for step in range(self.steps):
            start = t0 + step * self.step_ps
            host.append((self.marker, start, self.step_ps, {"_r": 1} if self.root else {}))
            host.append(("IteratorGetNext", start + 10 * PS_PER_US, self.loader_ps - 20 * PS_PER_US, {}))
            launch = start + self.loader_ps
            t = launch + 50 * PS_PER_US
            for name, us in KERNELS:
                host.append(("cudaLaunchKernel", launch, 5 * PS_PER_US, {"correlation_id": corr}))
                gpu0.append((name, t, us * PS_PER_US, corr))
                corr += 1
                t += us * PS_PER_US
                launch += 6 * PS_PER_US
            host.append(("cudaMemcpyAsync", launch, 5 * PS_PER_US, {"correlation_id": corr}))
            gpu1.append(("Memcpy HtoD (Pageable -> Device)", launch + 20 * PS_PER_US, 200 * PS_PER_US, corr))
            corr += 1
        planes = [self._host(host), self._device(0, gpu0), self._device(1, gpu1), self._device(2, [])]
        data = b"".join(_field_bytes(1, p) for p in planes) + _field_bytes(4, self.host.encode())
        return data, {"step_s": self.step_ps / 1e12, "busy_s": busy_ps / 1e12, "lead_s": self.loader_ps / 1e12,
                      "measured_steps": self.steps - 1}

    def write(self, logdir, run: str = "2026_01_01_00_00_00") -> tuple[Path, dict]:
        data, expected = self.build()
        path = Path(logdir) / "plugins" / "profile" / run / f"{self.host}.xplane.pb"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        return path, expected
