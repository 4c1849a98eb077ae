"""The CPU tests' world of several ranks: processes over torch.distributed's gloo, weft's
communicator a stand-in on that group, and weft's ops registered as CPU kernels by the script that
runs there (fp8_world_of_two.py, attention_world_of_two.py, moe_world_of_two.py). Each script's
`run(rank, wt)` checks its rank and returns whether every check passed; `main(run)` spawns the ranks;
the pytest side runs the script in processes of its own with `run_script`."""

import os
import subprocess
import sys
import types

WORLD = 2


def _rank_main(rank, port, run):
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    import weft.torch as wt
    from weft.torch import comm

    comm._state.update(comm=types.SimpleNamespace(world_size=WORLD, rank=rank), group=dist.group.WORLD)
    ok = run(rank, wt)
    dist.destroy_process_group()
    if not ok:
        sys.exit(1)


def main(run):
    """Spawns WORLD ranks of run(rank, wt); 0 where every rank's checks passed."""
    import torch.multiprocessing as mp

    try:
        mp.spawn(_rank_main, args=(29500 + os.getpid() % 2000, run), nprocs=WORLD)
    except mp.ProcessExitedException as e:
        print(f"a rank failed: {e}", flush=True)
        return 1
    return 0


def run_script(name):
    """Runs python/tests/NAME in processes of its own (skipping where gloo is missing); its stdout,
    after asserting it exited 0 and printed no FAILED line."""
    import pytest
    import torch

    if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), name)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    done = subprocess.run([sys.executable, script], capture_output=True, text=True, timeout=600, env=env)
    print(done.stdout)
    assert done.returncode == 0 and "FAILED" not in done.stdout, done.stdout[-4000:] + done.stderr[-4000:]
    return done.stdout
