"""``dlperf catalog``: list the benchmark suites, show one resolved, or check a suite file."""

from __future__ import annotations

import argparse
import json

DESCRIPTION = """\
List the benchmark suites of the catalog (one YAML file per suite). Built-in suites live in
dlperf_tasks/catalog/suites/; add your own by putting <id>.yaml files into a directory and
naming it in DLPERF_CATALOG_PATH (several directories separated by ':'), or with --catalog-dir.
A suite there with the same id as a built-in one replaces it."""

EPILOG = """\
examples:
  dlperf catalog                          table of all suites
  dlperf catalog show mxnet-bert          the suite with every default filled in (YAML)
  dlperf catalog show megatron-gpt --format json
  dlperf catalog check my-suite.yaml      validate a suite file without installing it"""


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "catalog", help="list benchmark suites, show or check one",
        description=DESCRIPTION, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--catalog-dir", action="append", default=[], metavar="DIR",
                   help="extra directory of suite YAML files (searched first; may be repeated)")
    p.add_argument("--format", choices=["table", "json"], default="table", help="output format of the list (default: table)")
    p.set_defaults(func=_list)
    sub = p.add_subparsers(dest="catalog_command", metavar="<subcommand>")
    show = sub.add_parser("show", help="print one suite with every default filled in",
                          description="Print one suite (by id or path) as resolved YAML or JSON.")
    show.add_argument("suite", help="suite id (e.g. mxnet-bert) or path to a .yaml file")
    show.add_argument("--format", choices=["yaml", "json"], default="yaml", help="output format (default: yaml)")
    show.set_defaults(func=_show)
    check = sub.add_parser("check", help="validate suite files and report every problem",
                           description="Validate suite YAML files (none given: every suite of the catalog) and "
                                       "list the container images without a pinned digest; exit 0 when all "
                                       "are valid, 2 otherwise.")
    check.add_argument("files", nargs="*", help="suite .yaml files (default: the whole catalog)")
    check.set_defaults(func=_check)
    build = sub.add_parser("build", help="validate the built-in suites and store them for fast loading (make install)",
                           description="Validate every built-in suite file with every check and write the validated "
                                       "suites beside them (dlperf_tasks/catalog/builtin_suites.json), which commands "
                                       "then load instead of the YAML while a file is unchanged; exit 2 on an invalid "
                                       "file (nothing is written).")
    build.set_defaults(func=_build)


def _list(args) -> int:
    import sys

    from dlperf_tasks.catalog import list_suites
    from dlperf_tasks.catalog.site import site_warnings
    from dlperf_tasks.catalog.plan import format_table

    errors: list = []
    suites = list_suites(extra_dirs=args.catalog_dir, errors=errors)  # a broken site file hides only itself
    for line in [str(e) for e in errors] + [w for s in suites for w in site_warnings(s)]:
        print(f"warning: {line}", file=sys.stderr)
    if args.format == "json":
        print(json.dumps([_row_dict(s) for s in suites], indent=2))
        return 0
    head = ["id", "framework", "image", "digest", "min driver", "topologies", "batch sizes", "precisions", "xla",
            "trials"]
    rows = []
    for s in suites:
        d = _row_dict(s)
        digest = (d["digest"][:19] + "...") if d["digest"] else ("(unset)" if d["image"] else "-")
        rows.append([s.id, s.framework, d["image"] or "(host)", digest, d["min_driver"] or "-",
                     ",".join(d["topologies"]), d["batch_sizes_text"], ",".join(s.precisions),
                     "/".join("on" if x else "off" for x in s.xla), str(s.trials)])
    print(format_table(head, rows))
    return 0


def _row_dict(s) -> dict:
    if s.batch_sizes_by_precision:
        bz_text = " ".join(f"{p}:{','.join(map(str, v))}" for p, v in s.batch_sizes_by_precision.items())
    elif s.layouts:
        bz_text = f"{len(s.layouts)} cases"
    else:
        bz_text = ",".join(map(str, s.batch_sizes))
    return {
        "id": s.id, "framework": s.framework, "dag": s.dag, "model": s.model,
        "image": s.container.image if s.container else None,
        "digest": s.container.digest if s.container else None,
        "min_driver": s.container.min_driver if s.container else None,
        "versions": dict(s.container.versions) if s.container else {},
        "topologies": [t.name for t in s.topologies], "batch_sizes": list(s.batch_sizes),
        "batch_sizes_text": bz_text, "precisions": list(s.precisions), "xla": list(s.xla),
        "trials": s.trials, "cases": [lay.case for _, lay in s.layouts], "source": s.source,
    }


def _show(args) -> int:
    from dlperf_tasks.catalog import load_suite
    from dlperf_tasks.catalog.validate import suite_to_dict

    suite = load_suite(args.suite, extra_dirs=args.catalog_dir)
    d = suite_to_dict(suite)
    if args.format == "json":
        print(json.dumps({**d, "source": suite.source}, indent=2))
    else:
        import yaml

        class _Dumper(yaml.SafeDumper):
            pass

        def _str(dumper, value):  # multi-line text (patch diffs) as readable block literals
            style = "|" if "\n" in value else None
            return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

        _Dumper.add_representer(str, _str)
        print(f"# source: {suite.source}")
        print(yaml.dump(d, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=110), end="")
    return 0


def _check(args) -> int:
    import sys

    from dlperf_tasks.catalog import load_file
    from dlperf_tasks.core.errors import CatalogError

    from dlperf_tasks.catalog.site import site_warnings

    bad = 0
    files = list(args.files)
    if not files:
        from dlperf_tasks.catalog import list_suites

        errors: list = []
        files = [s.source for s in list_suites(extra_dirs=args.catalog_dir, errors=errors)]
        for e in errors:
            bad += 1
            print(str(e), file=sys.stderr)
    unpinned = []
    for f in files:
        try:
            s = load_file(f)
            print(f"{f}: ok ({s.id}, framework {s.framework})")
            for line in site_warnings(s):  # privileged, devices, capabilities, a replaced built-in
                print(f"warning: {line}", file=sys.stderr)
            if s.container is not None and not s.container.digest:
                unpinned.append(f"{s.id}: image {s.container.image} has no digest (set container.digest: "
                                f"sha256:... once; see docs/deploy.md, Image digests)")
        except CatalogError as exc:
            bad += 1
            print(str(exc), file=sys.stderr)
    for line in unpinned:
        print(f"no digest: {line}")
    return 2 if bad else 0


def _build(args) -> int:
    from dlperf_tasks.catalog.builtin import DATA_FILE
    from dlperf_tasks.catalog.loader import build_builtin

    files = build_builtin()
    print(f"{DATA_FILE}: {len(files)} built-in suites validated")
    return 0
