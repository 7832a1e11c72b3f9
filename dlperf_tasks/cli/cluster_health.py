"""``dlperf cluster quarantine`` / ``dlperf cluster clear NODE``: the nodes the service keeps
out of its sweeps (node health). The state is ``state/quarantine.json`` in the run
store (``dlperf_tasks/policy/nodehealth.py``), the one every worker host reads: ``--store URL``, else
the settings' store. ``--work-dir DIR`` names a directory's ``quarantine.json`` instead (a
library user's sweep without a store)."""

from __future__ import annotations

from pathlib import Path


def register(sub) -> None:
    q = sub.add_parser("quarantine", help="list the quarantined nodes and why")
    c = sub.add_parser("clear", help="take a node out of quarantine (it gets trials again)")
    c.add_argument("node", metavar="NODE", help="inventory node name")
    for p in (q, c):
        p.add_argument("--store", metavar="URL", help="the service's run store (default: the settings' store_url)")
        p.add_argument("--work-dir", metavar="DIR", help="a directory's quarantine.json instead of the store's")
    q.set_defaults(func=run_list)
    c.set_defaults(func=run_clear)


def quarantine(args):
    from dlperf_tasks.store.quarantine import Quarantine

    if getattr(args, "work_dir", None):
        return Quarantine(Path(args.work_dir).expanduser())
    from dlperf_tasks.core.settings import Settings

    return Quarantine.for_settings(Settings.load().with_store(getattr(args, "store", None)))


def run_list(args) -> int:
    q = quarantine(args)
    nodes = q.nodes()
    if not nodes:
        print(f"no quarantined node ({q.where})")
        return 0
    for name, d in sorted(nodes.items()):
        print(f"{name}: since {d.get('since')} (run {d.get('run_id') or '-'})")
        for e in d.get("evidence", []):
            print(f"  {e}")
    print(f"clear with: dlperf cluster clear NODE   (state: {q.where})")
    return 0


def run_clear(args) -> int:
    from dlperf_tasks.core.errors import DlperfError

    q = quarantine(args)
    if not q.clear(args.node):
        known = ", ".join(sorted(q.nodes())) or "none"
        raise DlperfError(f"node {args.node} is not quarantined (quarantined: {known}; state {q.where})")
    print(f"node {args.node} cleared: it gets trials again")
    return 0
