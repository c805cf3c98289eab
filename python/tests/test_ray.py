"""ferrite.ray on a local Ray cluster of two nodes (two `ray start`s on this
machine, one CPU each): map_batches(Embed, concurrency=2) over 2,000 texts
gives every vector bit-identical to Embedder.encode in this process, and
both nodes did work. Skipped only where Ray is not installed."""

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

import ferrite
from conftest import same_bits

try:
    import ray
    import ray.data  # noqa: F401
    import ferrite.ray as fray
except ImportError as e:  # pragma: no cover - depends on the machine
    pytest.skip(
        f"Ray is not installed here ({e}); `pip install 'ferrite[ray]'` "
        "(scripts/test-python.sh installs it) to run the two-node test",
        allow_module_level=True,
    )

N_TEXTS = 2000


class NodeEmbed(fray.Embed):
    """Embed, plus the id of the node that ran each row."""

    def __call__(self, batch):
        batch = super().__call__(batch)
        node = ray.get_runtime_context().get_node_id()
        batch["node"] = np.array([node] * len(batch["text"]), dtype=object)
        return batch


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ray_start(*args, env):
    """`ray start ... --block` in a process group of its own (stopped by
    group at the end: only the processes this test started)."""
    ray_cli = Path(sys.executable).with_name("ray")
    cmd = [str(ray_cli), "start", "--block", "--num-cpus", "1", "--disable-usage-stats",
           "--object-store-memory", str(100 * 1024 * 1024), *args]
    return subprocess.Popen(cmd, env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def stop_group(p):
    for sig, wait in ((signal.SIGTERM, 15), (signal.SIGKILL, 5)):
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            return
        try:
            p.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


@pytest.fixture(scope="module")
def cluster():
    port = free_port()
    temp = tempfile.mkdtemp(prefix="ray-ferrite-")
    # Everything on the loopback address; no token: nothing outside this
    # machine can reach the cluster, and a token left in ~/.ray by another
    # run must not switch authentication on for some processes only.
    os.environ["RAY_AUTH_MODE"] = "disabled"
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0", RAY_NODE_IP_ADDRESS="127.0.0.1")
    head = ray_start("--head", "--node-ip-address", "127.0.0.1", "--port", str(port),
                     "--include-dashboard=false", "--temp-dir", temp, env=env)
    nodes = [head]
    try:
        address = f"127.0.0.1:{port}"
        deadline = time.time() + 120
        worker = None
        while time.time() < deadline:
            if head.poll() is not None:
                pytest.fail(f"ray start --head exited: {head.stderr.read().decode()[-2000:]}")
            if worker is None:
                with socket.socket() as s:
                    if s.connect_ex(("127.0.0.1", port)) == 0:
                        worker = ray_start("--address", address, "--node-ip-address",
                                           "127.0.0.1", env=env)
                        nodes.append(worker)
            else:
                break
            time.sleep(0.5)
        assert worker is not None, "the head node did not come up"
        ray.init(address=address, logging_level="warning", _node_ip_address="127.0.0.1")
        while time.time() < deadline:
            alive = [n for n in ray.nodes() if n["Alive"]]
            if len(alive) == 2:
                break
            if worker.poll() is not None:
                pytest.fail(f"ray start --address exited: {worker.stderr.read().decode()[-2000:]}")
            time.sleep(0.5)
        assert len([n for n in ray.nodes() if n["Alive"]]) == 2, "the second node did not join"
        yield address
    finally:
        if ray.is_initialized():
            ray.shutdown()
        for p in reversed(nodes):
            stop_group(p)
        shutil.rmtree(temp, ignore_errors=True)


def texts(bench_sentences, corpus):
    base = bench_sentences + corpus
    return [f"{base[i % len(base)]} [{i}]" for i in range(N_TEXTS)]


def test_embed_on_two_nodes(cluster, bench_sentences, corpus):
    import ray.cloudpickle

    # Workers cannot import this test module: send NodeEmbed by value.
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    data = texts(bench_sentences, corpus)
    model = str(Path(os.environ["FERRITE_MODELS"]) / "all-MiniLM-L6-v2")
    ds = ray.data.from_items([{"id": i, "text": t} for i, t in enumerate(data)])
    ds = ds.map_batches(
        NodeEmbed,
        fn_constructor_kwargs={"model": model},
        concurrency=2,
        num_cpus=1,
        batch_size=100,
        batch_format="numpy",
    )
    start = time.time()
    rows = ds.take_all()
    print(f"{N_TEXTS} texts on 2 nodes in {time.time() - start:.1f} s")
    assert len(rows) == N_TEXTS
    rows.sort(key=lambda r: r["id"])
    got = np.stack([r["embedding"] for r in rows])
    want = ferrite.Embedder(model, threads=1).encode(data)
    assert got.dtype == np.float32
    assert same_bits(got, want)
    per_node = {}
    for r in rows:
        per_node[r["node"]] = per_node.get(r["node"], 0) + 1
    print(f"rows per node: {sorted(per_node.values())}")
    assert len(per_node) == 2, per_node
    assert set(per_node) == {n["NodeID"] for n in ray.nodes() if n["Alive"]}
