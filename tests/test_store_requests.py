"""What makes a no-op build on a shared bucket fast: a few requests, not one per target.

Issue #16: a no-op build of 1,000 cached targets sent 2,003 requests (an entry read and a
listing per target), and on real GCS each costs a round trip. Now one listing (a page
per thousand entries) answers every look-up, entries read before are remembered by
generation, and outputs are verified when read rather than listed per look-up. Counted
here at the HTTP boundary, against fake-gcs-server. (The speed itself is measured by
bench/store.py, not asserted here.)
"""

from __future__ import annotations

from conftest import build_json, cli_env, run_cli, statuses
from test_store_faults import FaultyProxy


def _genrules(count: int) -> dict[str, str]:
    lines = [f'genrule(name = "t{i}", outs = ["t{i}.txt"], cmd = "echo {i} > $@")' for i in range(count)]
    return {"pkg/BUILD.marin": "\n".join(lines) + "\n"}


def _noop_requests(ws, store: str, upstream: str) -> int:
    proxy = FaultyProxy(upstream)
    try:
        rc, out, err = run_cli(
            ws, "build", "--json", "//pkg:all", store=store, env={**cli_env(), "STORAGE_EMULATOR_HOST": proxy.url}
        )
        assert rc == 0, err
        assert '"cached": ' in out and '"built": 0' in out
        return len(proxy.requests)
    finally:
        proxy.close()


def test_a_noop_build_sends_a_few_requests_whatever_the_number_of_targets(make_workspace, fake_gcs_server, gcs_bucket):
    counts = {}
    for count in (40, 240):
        ws = make_workspace(_genrules(count))
        store = f"gs://{gcs_bucket}/n{count}"
        assert set(statuses(build_json(ws, "//pkg:all", store=store)).values()) == {"built"}
        _noop_requests(ws, store, fake_gcs_server.url)  # the first no-op on a machine reads each entry once
        counts[count] = _noop_requests(ws, store, fake_gcs_server.url)
    assert counts[240] <= 0.05 * 240 + 10, counts
    assert counts[240] - counts[40] <= 0.05 * 200, counts
