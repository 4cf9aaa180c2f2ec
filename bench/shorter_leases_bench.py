#!/usr/bin/python3
"""A much slower worker beside a fast one on the guided layout, with the Python SDK
following shorter lease ends and without, measured in one run.

  ANTDT_BIN_DIR=build/bin PYTHONPATH=build/python /usr/bin/python3 bench/shorter_leases_bench.py \\
      [--records 3000] [--slow-ms 50] [--fast-ms 2] [--runs 1]

Each run: a fresh antdt-sharding-service, a dataset of --records records (shards of 200,
min_shard_records 10, workers 2); the slow worker (--slow-ms a record) starts first and
holds a whole shard, the fast one (--fast-ms a record) starts 0.3 s later; both loop over
ShardingClient.records(commit_every=5). Prints each run's job time (until both loops
end), when each worker ended and how many records it took, and the ratio not following /
following. docs/sharding.md keeps the figures."""

import argparse
import os
import shutil
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python", "tests"))
from server_process import ServerProcess  # noqa: E402

from antdt.sharding import ShardingClient  # noqa: E402


def run(follow, args):
    work = tempfile.mkdtemp(prefix="antdt-shorter-leases-")
    service = ServerProcess("antdt-sharding-service", work)
    try:
        address = service.spawn(["--listen", "127.0.0.1:0", "--state-dir", os.path.join(work, "state"),
                                 "--auth", "none"])[0]
        fast = ShardingClient(address, "bench", "train", "fast")
        slow = ShardingClient(address, "bench", "train", "slow", follow_shorter_leases=follow)
        fast.create_dataset(record_count=args.records, shard_size=200, min_shard_records=10, workers=2)
        taken, ended = {"fast": 0, "slow": 0}, {}
        start = time.monotonic()

        def loop(name, client, per_record_s):
            for _shard, _record in client.records(commit_every=5):
                taken[name] += 1
                time.sleep(per_record_s)
            ended[name] = time.monotonic() - start

        threads = [threading.Thread(target=loop, args=("slow", slow, args.slow_ms / 1000))]
        threads[0].start()
        time.sleep(0.3)
        threads.append(threading.Thread(target=loop, args=("fast", fast, args.fast_ms / 1000)))
        threads[1].start()
        for t in threads:
            t.join()
        assert taken["fast"] + taken["slow"] == args.records, taken
        fast.close()
        slow.close()
        return max(ended.values()), ended, taken, slow.leases_shortened
    finally:
        service.kill()
        shutil.rmtree(work, ignore_errors=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--records", type=int, default=3000)
    p.add_argument("--slow-ms", type=float, default=50)
    p.add_argument("--fast-ms", type=float, default=2)
    p.add_argument("--runs", type=int, default=1)
    args = p.parse_args()
    for i in range(args.runs):
        results = {}
        for follow in (False, True):
            jct, ended, taken, cut = run(follow, args)
            results[follow] = jct
            print("run %d, %-13s job %.1f s (fast ended at %.1f s, slow at %.1f s); records fast %d, "
                  "slow %d; leases shortened %d" % (i + 1, "following:" if follow else "not following:",
                                                   jct, ended["fast"], ended["slow"], taken["fast"],
                                                   taken["slow"], cut))
        print("run %d, not following / following: %.2fx" % (i + 1, results[False] / results[True]))


if __name__ == "__main__":
    main()
