"""Where Adam's eps governs a DQN run's steps, per weight tensor, from the run's last checkpoint.

Adam steps ``lr * m_hat / (sqrt(v_hat) + eps)``: about ``lr`` where sqrt(v_hat) >> eps, plain SGD
(``lr / eps * m_hat``) where it is << eps. For each weight tensor of the online net this prints the
median sqrt(v_hat) and the share of elements below the run's eps; the learner's ``adam_below_eps``
metric is the whole network's share (the same test: ``adam_stats.below_eps``). Reads only the run's
own files (safetensors and JSON).

    python -m benchmarks.adam_moments RUN_DIR [RUN_DIR ...]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file

from mqttrl_plugins.dqn.adam_stats import below_eps
from mqttrl_plugins.dqn.learner import _net_from_info


def checkpoint_dir(run_dir: Path) -> Path:
    """The checkpoint ``checkpoints/latest`` names (a file holding a folder's name)."""
    ckpts = run_dir / "checkpoints"
    return ckpts / (ckpts / "latest").read_text().strip()


def moments(run_dir: Path) -> tuple[dict, list[tuple[str, float, float]]]:
    """(the run's facts, [(tensor name, median sqrt(v_hat), share below eps)]) of the last checkpoint."""
    ck = checkpoint_dir(run_dir)
    state = load_file(str(ck / "state.safetensors"))
    meta = json.loads((ck / "meta.json").read_text())["algo"]
    (group,) = meta["optimizer"]["param_groups"]  # the checkpoint's own eps and betas
    eps, beta2 = float(group["eps"]), float(group["betas"][1])
    names = [n for n, _ in _net_from_info(meta["net"]).named_parameters()]
    rows, below, total = [], 0, 0
    for i, name in enumerate(names):
        v = state[f"algo/optim.state.{i}.exp_avg_sq"]
        step = float(state[f"algo/optim.state.{i}.step"][0])
        under = below_eps(v, step, eps, beta2)
        below += int(under.sum())
        total += v.size
        rows.append((name, float(np.median(np.sqrt(v / (1.0 - beta2**step)))), float(under.mean())))
    facts = {
        "head": meta["net"].get("distributional", "none"),
        "noisy": bool(meta["net"].get("noisy")),
        "updates": int(meta["updates"]),
        "lr": group["lr"],
        "eps": eps,
        "below": below / total,
    }
    return facts, rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dirs", nargs="+", type=Path, help="DQN run directories (with checkpoints/)")
    args = p.parse_args(argv)
    for run_dir in args.run_dirs:
        try:
            facts, rows = moments(run_dir)
        except (OSError, KeyError, ValueError) as e:
            print(f"{run_dir}: no DQN checkpoint with Adam's moments to read ({type(e).__name__}: {e})")
            continue
        print(
            f"{run_dir}: head {facts['head']}, noisy {facts['noisy']}, {facts['updates']:,} updates, "
            f"lr {facts['lr']:g}, eps {facts['eps']:g}: {facts['below']:.2f} of the network below eps"
        )
        for name, median, share in rows:
            if name.endswith(("weight", "weight_mu")):
                print(f"  {name:28s} median sqrt(v_hat) {median:.1e}   below eps {share:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
