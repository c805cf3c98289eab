#!/usr/bin/env python3
"""Embed a corpus into Parquet with ferrite on Ray (one machine or many).

    python examples/ray_embed.py INPUT OUTPUT_DIR [--model minilm]
        [--concurrency N] [--num-cpus C] [--batch-size B] [--address ADDR]

INPUT is a text file (one text per line) or a Parquet file / directory with
a ``text`` column (``--column`` names another). OUTPUT_DIR gets Parquet
files with every input column plus ``embedding`` (float32 vectors).

Ray: ``ray.init()`` starts a local one-machine cluster when ``--address``
is not given and none is running (``RAY_ADDRESS`` is honoured); ``--address
auto`` joins the cluster this machine belongs to (``ray start --head`` /
``ray start --address HEAD:6379`` on each node), and on Kubernetes the
RayJob in deploy/kuberay/ runs this script. Each of ``--concurrency``
actors loads the model once and computes on ``--num-cpus`` threads. The
model must be readable on every node: a path on shared storage, or a
short name that each node resolves in its ``FERRITE_MODELS``.
"""

import argparse
import os
import time

import ray

import ferrite.ray


def read(path, column):
    if path.endswith(".txt"):
        with open(path, encoding="utf-8") as f:
            texts = f.read().split("\n")
        if texts and texts[-1] == "":
            texts.pop()
        return ray.data.from_items([{column: t} for t in texts])
    return ray.data.read_parquet(path)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("input")
    p.add_argument("output")
    p.add_argument("--model", default="minilm", help="path or short name (default: minilm)")
    p.add_argument("--column", default="text")
    p.add_argument("--concurrency", type=int, default=2, help="actors (default 2)")
    p.add_argument("--num-cpus", type=float, default=1, help="CPUs (threads) per actor")
    p.add_argument("--batch-size", type=int, default=256, help="rows per map_batches call")
    p.add_argument("--address", default=None, help="Ray cluster (default: local or RAY_ADDRESS)")
    args = p.parse_args()

    model = args.model
    if os.path.exists(model):  # a local path: absolute, for the actors
        model = os.path.abspath(model)
    ray.init(address=args.address)
    start = time.time()
    ds = read(args.input, args.column).map_batches(
        ferrite.ray.Embed,
        fn_constructor_kwargs={"model": model, "column": args.column},
        concurrency=args.concurrency,
        num_cpus=args.num_cpus,
        batch_size=args.batch_size,
        batch_format="numpy",
    )
    ds.write_parquet(args.output)
    n = ray.data.read_parquet(args.output).count()
    secs = time.time() - start
    print(f"embedded {n} texts in {secs:.1f} s ({n / secs:.1f} texts/s) into {args.output}")


if __name__ == "__main__":
    main()
