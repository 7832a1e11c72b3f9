"""``dlperf publish``: copy a run directory to the object store (redacted, manifest last)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from dlperf_tasks.core.errors import StoreError
from dlperf_tasks.cli._args import positive_int

DESCRIPTION = """\
Publish a run directory (result.json, report.md, plots/, logs/ as a sweep leaves them) to an
object store: S3 (AWS, Aliyun OSS, MinIO, SeaweedFS...) or a local directory.

Steps: 1) build a spool under RUN_DIR/publish-spool/: a redacted copy of exactly what is
uploaded (IP addresses, the inventory's host names, node names and user names replaced by
<ip-1>, <host-1>, <node-1>, <user-1>...; the unredacted files stay in RUN_DIR) plus
manifest.json (size + sha256 of every object); 2) refuse if a known host/IP/user survived;
3) upload logs first, then result.json, report.md and plots, and manifest.json LAST, each
retried with backoff and verified; 4) update the suite index (index/<suite>.json).

Objects already in the store with the same checksum are skipped, so publishing again is
harmless. A different run already stored under the same run id is refused (both named)
unless --replace is given. If publishing fails midway, the store holds no manifest for the run (it is
visibly incomplete) and the spool is kept: 'dlperf publish --resume RUN_DIR' uploads that
same spool later, giving identical objects.

Store URLs:
  s3://BUCKET[/PREFIX]?endpoint=URL&region=R&addressing_style=path|virtual|auto
  file:///ABSOLUTE/DIR          (also a plain directory path)
Default: $DLPERF_STORE_URL, else file://<checkout>/.run/store (where make run publishes).
S3 credentials only from the environment: DLPERF_S3_ACCESS_KEY_ID and
DLPERF_S3_SECRET_ACCESS_KEY (or AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY)."""

EPILOG = """\
examples:
  dlperf publish runs/mxnet-bert-20260102T030405-abc123 --store file:///srv/dlperf
  dlperf publish RUN_DIR --inventory cluster.yaml \\
      --store 's3://dlperf-results/nightly?endpoint=https://oss-cn-beijing.aliyuncs.com&addressing_style=virtual'
  dlperf publish --resume RUN_DIR          # finish a publish that failed (same store as before)

exit status: 0 published; 2 on any error (unreachable endpoint, missing bucket, refused
credentials, redaction leak...), with the message naming endpoint, bucket and key."""


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "publish", help="upload a run directory to S3/OSS or a local store (redacted, manifest last)",
        description=DESCRIPTION, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir", metavar="RUN_DIR", help="the run directory (holds result.json)")
    p.add_argument("--store", metavar="URL",
                   help="where to publish (see above); with --resume the default is the store of the first attempt")
    p.add_argument("--resume", action="store_true",
                   help="upload the existing spool of a failed publish instead of rebuilding it")
    p.add_argument("--inventory", metavar="YAML",
                   help="cluster inventory whose hosts, node names and users are redacted "
                        "(IP addresses are always redacted)")
    p.add_argument("--redact", metavar="KINDS", default=None,
                   help="what to redact: comma list of ips,hostnames,users (default: all), or 'none'")
    p.add_argument("--retries", type=positive_int, metavar="N", default=None,
                   help="attempts per object before giving up (default 4, exponential backoff)")
    p.add_argument("--replace", action="store_true",
                   help="replace a different run the store holds under the same run id (refused without it)")
    p.add_argument("--json", action="store_true", help="print the outcome as JSON")
    p.set_defaults(func=run)



def run(args: argparse.Namespace) -> int:
    from dlperf_tasks.remote.inventory import load_for_redaction
    from dlperf_tasks.store import RetryPolicy
    from dlperf_tasks.store.store import open_store
    from dlperf_tasks.store.spool import Spool

    run_dir = Path(args.run_dir)
    if not run_dir.is_dir():
        raise StoreError(f"run directory {run_dir} does not exist")
    url = args.store
    if url is None and args.resume:
        url = Spool.load(run_dir).read_target().get("store")
    from dlperf_tasks.core.safeurl import safe_url
    from dlperf_tasks.core.settings import Settings

    where = Settings.load().with_store(url, "--store" if args.store else "the first attempt")
    print(where.describe_store(), file=sys.stderr)
    inventory = load_for_redaction(args.inventory) if args.inventory else None
    store = open_store(where, redaction=args.redact, inventory=inventory)
    retry = RetryPolicy(attempts=args.retries) if args.retries else None
    res = store.publish(run_dir, resume=args.resume, retry=retry, replace=args.replace,
                        on_wait=lambda msg: print(f"dlperf publish: {msg}", file=sys.stderr, flush=True))
    if res.replaced:
        print(f"dlperf publish: replaced the run stored under this id ({res.replaced}): "
              + (f"could not remove {len(res.replaced_left)}: {', '.join(res.replaced_left[:5])}"
                 if res.replaced_left else "its objects, verdicts and index row are gone"), file=sys.stderr)
    for item in res.not_published:  # links, hard links, special files, binary logs: named, never followed
        print(f"dlperf publish: not published: {item.get('path')}: {item.get('reason')}", file=sys.stderr)
    if args.json:
        print(json.dumps({"run_id": res.run_id, "suite": res.suite, "url": res.url,
                          "not_published": res.not_published,
                          "manifest_key": res.manifest_key, "uploaded": res.uploaded, "skipped": res.skipped,
                          "total_bytes": res.total_bytes, "seconds": round(res.seconds, 3)}, indent=1))
    else:
        print(f"published {res.run_id} -> {safe_url(res.url)} ({len(res.uploaded)} uploaded, "
              f"{len(res.skipped)} already there, {res.total_bytes} bytes, {res.seconds:.1f}s)")
    sys.stdout.flush()
    return 0
