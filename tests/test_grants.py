"""Data grants as the operator writes them and the two checks a site-shard path passes: as written (the service,
at submit) and with symlinks resolved (the site's node, before any byte is read)."""

from __future__ import annotations

import os

import pytest

from raysampler.grants import AccessRefused, DataGrant, check_lexical, check_on_site, normalise_path, parse_grants


def test_grants_parse_per_tenant_and_site():
    g = parse_grants([("t1@a:/srv/data/t1/", "env"), ("t1@b:/srv/data/t1", "env"), ("t2@a:/srv//data/./t2", "f:3")])
    assert g.prefixes("t1", "a") == ("/srv/data/t1",) and g.prefixes("t1", "b") == ("/srv/data/t1",)
    assert g.prefixes("t2", "a") == ("/srv/data/t2",) and g.prefixes("t2", "b") == () and g.prefixes("t3", "a") == ()
    assert DataGrant("t2", "a", "/srv/data/t2") in g.grants
    assert len(parse_grants([("  ", "env")])) == 0


@pytest.mark.parametrize(
    "entry,why",
    [
        ("t1:/srv/data", "tenant@site"),
        ("t1@a/srv/data", "tenant@site"),
        ("t 1@a:/srv", "tenant"),
        ("t1@-a:/srv", "site"),
        ("t1@a:srv/data", "absolute"),
        ("t1@a:/srv/../etc", "'..'"),
        ("t1@a:~/data", "absolute"),
        ("t1@a:/", "whole file system"),
    ],
)
def test_a_malformed_grant_is_refused_naming_the_entry_and_where(entry, why):
    with pytest.raises(ValueError) as err:
        parse_grants([("t0@a:/ok", "grants.txt:1"), (entry, "grants.txt:2")])
    assert "grants.txt:2" in str(err.value) and repr(entry) in str(err.value) and why in str(err.value)


def test_paths_are_normalised_and_checked_component_by_component():
    assert normalise_path("/srv//data/./t1/x.csv") == "/srv/data/t1/x.csv"
    for bad in ("srv/x.csv", "/srv/../x.csv", "/srv/~t1/x.csv", "/srv/x\0.csv", ""):
        with pytest.raises(ValueError):
            normalise_path(bad)
    assert check_lexical("/srv/data/t1/sub/x.csv", ["/srv/data/t1"]) == "/srv/data/t1/sub/x.csv"
    refusals = set()
    for bad in ("/srv/data/t1x/x.csv", "/srv/data/t1/../t2/x.csv", "srv/data/t1/x.csv", "/srv/data/t2/x.csv"):
        with pytest.raises(AccessRefused) as err:
            check_lexical(bad, ["/srv/data/t1"])
        refusals.add(str(err.value))
    with pytest.raises(AccessRefused):
        check_lexical("/srv/data/t1/x.csv", [])  # no grant, no site shard
    assert len(refusals) == 1 and "/srv" not in refusals.pop()  # one text, naming no file


def test_on_site_the_real_path_must_stay_in_the_grant(tmp_path):
    granted, other = tmp_path / "t1", tmp_path / "t2"
    granted.mkdir()
    other.mkdir()
    (other / "secret.csv").write_text("y,x\n1,2\n")
    (granted / "own.csv").write_text("y,x\n1,2\n")
    (granted / "out").symlink_to(other)
    (granted / "in.csv").symlink_to(granted / "own.csv")
    (tmp_path / "alias").symlink_to(granted)  # a granted prefix that is itself a link is resolved too
    assert check_on_site(str(granted / "in.csv"), [str(granted)]) == os.path.realpath(granted / "own.csv")
    assert check_on_site(str(tmp_path / "alias" / "own.csv"), [str(tmp_path / "alias")])
    texts = set()
    for bad in (granted / "out" / "secret.csv", granted / "out" / "missing.csv"):
        with pytest.raises(AccessRefused) as err:
            check_on_site(str(bad), [str(granted)])
        texts.add(str(err.value))
    assert len(texts) == 1  # existing or missing, the same answer
