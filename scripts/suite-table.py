#!/usr/bin/env python3
"""Tabulate rdma-core's pyverbs suite from unittest -v logs and hold it to
the kernel's Soft-RoCE on the same suite.

usage: suite-table.py BASELINE LOG... [--known FILE]

Each LOG is the verbose output of `run_tests.py -v` (one file's run or the
whole suite). unittest prints a result as
    test_x (tests.test_mod.Class.test_x) ... ok
or, for a test with a docstring, the id on one line and
    First line of the docstring ... skipped 'why'
on the next; the id is the last one seen. BASELINE has one line per test:
"OUTCOME  tests.mod.Class.test  [# reason]" (rxe's run in the qemu harness).

Prints a markdown table per test file (ran, ok, fail, error, skip, and the
reasons of skips, failures and errors), then every test that passes on the
baseline and not here. Exits 1 if any test failed or errored, or passed on
the baseline but not here, unless FILE (--known) lists its id with a reason.
"""
import collections
import re
import sys

ID = re.compile(r'\((tests\.(test_\w+)\.[\w.]+)\)')
RES = re.compile(r' \.\.\. (ok|FAIL|ERROR|skipped|expected failure|unexpected success)(?: (.*))?$')
HDR = re.compile(r'^(FAIL|ERROR): \w+ \((tests\.[\w.]+)\)')


def parse(path, out, why):
    cur = None
    hdr = None
    for line in open(path, errors='replace'):
        line = line.rstrip('\n')
        m = HDR.match(line)
        if m:
            hdr = m.group(2)
            continue
        if hdr:
            # the exception: the first unindented "Type: message" line
            if line and not line.startswith((' ', '-', '=', 'Traceback')) and ': ' in line:
                why.setdefault(hdr, line.strip()[:160])
                hdr = None
            continue
        m = ID.search(line)
        if m:
            cur = m.group(1)
        r = RES.search(line)
        if not r and cur and line.strip() in ('ok', 'FAIL', 'ERROR'):
            # a test that printed to stdout: its result ends a later line
            out[cur] = line.strip()
            cur = None
            continue
        if r and cur:
            reason = (r.group(2) or '').strip().strip('\'"')
            out[cur] = r.group(1).split()[0]
            if reason:
                why[cur] = reason
            cur = None


def main():
    args = sys.argv[1:]
    known = {}
    if '--known' in args:
        i = args.index('--known')
        for line in open(args[i + 1]):
            line = line.strip()
            if line and not line.startswith('#'):
                tid, _, reason = line.partition(' ')
                known[tid] = reason.strip()
        del args[i:i + 2]
    base = {}
    for line in open(args[0]):
        parts = line.split()
        if len(parts) >= 2:
            base[parts[1]] = parts[0]
    got, why = {}, {}
    for path in args[1:]:
        parse(path, got, why)

    rows = collections.OrderedDict()
    for tid in sorted(set(got) | set(base)):
        mod = tid.split('.')[1]
        rows.setdefault(mod, collections.Counter())
        res = got.get(tid, 'missing')
        rows[mod]['ran'] += res != 'missing'
        rows[mod][res] += 1
    print('| file | ran | ok | fail | error | skip | rxe ok | reasons (skips, failures) |')
    print('|---|---:|---:|---:|---:|---:|---:|---|')
    tot = collections.Counter()
    for mod, c in rows.items():
        reasons = collections.Counter(
            why.get(t, '?') for t in got if t.split('.')[1] == mod and got[t] != 'ok')
        rxe_ok = sum(1 for t, r in base.items() if r == 'ok' and t.split('.')[1] == mod)
        text = '; '.join(f'{r} ({n})' if n > 1 else r for r, n in reasons.most_common())
        print(f"| {mod} | {c['ran']} | {c['ok']} | {c['FAIL']} | {c['ERROR']} | {c['skipped']} | {rxe_ok} | {text} |")
        for k in ('ran', 'ok', 'FAIL', 'ERROR', 'skipped', 'missing'):
            tot[k] += c[k]
        tot['rxe'] += rxe_ok
    print(f"| **total** | **{tot['ran']}** | **{tot['ok']}** | **{tot['FAIL']}** | **{tot['ERROR']}** "
          f"| **{tot['skipped']}** | **{tot['rxe']}** | |")

    bad = []
    for tid, res in sorted(got.items()):
        if res in ('FAIL', 'ERROR') and tid not in known:
            bad.append(f'{res}: {tid}: {why.get(tid, "")}')
    for tid, res in sorted(base.items()):
        mine = got.get(tid, 'missing')
        if res == 'ok' and mine != 'ok':
            line = f'rxe passes, here {mine}: {tid}: {why.get(tid, "")}'
            if tid in known:
                print(f'known: {line} ({known[tid]})')
            else:
                bad.append(line)
    beyond = [t for t, r in got.items() if r == 'ok' and base.get(t) != 'ok']
    print(f'\npassing here and not on rxe: {len(beyond)}')
    for t in sorted(beyond):
        print(f'  {t}')
    for line in bad:
        print(line)
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
