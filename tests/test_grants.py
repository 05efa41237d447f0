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


# ---------------------------------------------------------------------------------------- object-storage prefixes


def test_uri_grants_parse_and_are_checked_component_by_component():
    g = parse_grants([("t1@a:s3://bucket/t1/", "env"), ("t2@a:gs://bkt/t2", "env"), ("t3@b:s3://whole-bucket/", "f:1")])
    assert g.prefixes("t1", "a") == ("s3://bucket/t1",) and g.prefixes("t2", "a") == ("gs://bkt/t2",)
    assert g.prefixes("t3", "b") == ("s3://whole-bucket",)
    assert check_lexical("s3://bucket/t1/sub/x.parquet", ["s3://bucket/t1"]) == "s3://bucket/t1/sub/x.parquet"
    assert check_lexical("s3://bucket/t1/data/", ["s3://bucket/t1"]) == "s3://bucket/t1/data/"  # a data set prefix
    assert check_on_site("s3://bucket/t1/x.parquet", ["/srv/t1", "s3://bucket/t1"]) == "s3://bucket/t1/x.parquet"
    assert check_lexical("s3://whole-bucket/any/x.parquet", ["s3://whole-bucket"])
    refusals = set()
    for bad in (
        "s3://bucket/t1x/x.parquet",  # a look-alike prefix
        "s3://bucket/t1/../t2/x.parquet",  # '..'
        "s3://bucket/t1//x.parquet",  # an empty component
        "s3://other-bucket/t1/x.parquet",  # another bucket
        "gs://bucket/t1/x.parquet",  # another scheme
        "s3://bucket/t2/x.parquet",  # another tenant's prefix
        "/bucket/t1/x.parquet",  # a path is no URI
        "s3://bucket/t1?x=1",  # a query
    ):
        with pytest.raises(AccessRefused) as err:
            check_lexical(bad, ["s3://bucket/t1"])
        refusals.add(str(err.value))
    with pytest.raises(AccessRefused):
        check_on_site("s3://bucket/t1/x.parquet", ["/srv/t1"])  # a path grant grants no object
    assert len(refusals) == 1 and "bucket" not in refusals.pop()


@pytest.mark.parametrize(
    "entry,why",
    [
        ("t1@a:s3://Bucket_Name/t1", "valid bucket"),
        ("t1@a:s3://bucket/t1/../t2", "'..'"),
        ("t1@a:ftp://bucket/t1", "scheme 'ftp'"),
        ("t1@a:s3://key:secret@bucket/t1", "credentials"),
        ("t1@a:s3://bucket/t1?endpoint=x", "query"),
    ],
)
def test_a_malformed_uri_grant_is_refused_naming_the_entry(entry, why):
    with pytest.raises(ValueError) as err:
        parse_grants([(entry, "grants.txt:4")])
    assert "grants.txt:4" in str(err.value) and why in str(err.value)


def test_object_uris_parse_without_looking_anything_up():
    from raysampler.objectstore import UnsafeKey, parse_uri

    u = parse_uri("s3://my-bucket/a/b/part-0.parquet")
    assert (u.scheme, u.bucket, u.key, u.fs_path) == (
        "s3",
        "my-bucket",
        ("a", "b", "part-0.parquet"),
        "my-bucket/a/b/part-0.parquet",
    )
    assert (
        str(parse_uri("s3://my-bucket/a/b/")) == "s3://my-bucket/a/b/" and parse_uri("s3://my-bucket/a/").trailing_slash
    )
    az = parse_uri("abfs://data@myaccount.dfs.core.windows.net/t1/x.parquet")
    assert (az.bucket, az.account, az.fs_path) == ("data", "myaccount", "data/t1/x.parquet")
    assert str(az.child("y")) == "abfs://data@myaccount.dfs.core.windows.net/t1/x.parquet/y"
    for bad, why in (
        ("s3://", "bucket"),
        ("s3://b/x", "bucket"),
        ("http://bucket/x", "scheme"),
        ("s3://bucket:9000/x", "port"),
        ("abfs://data@myaccount.example.com/x", "account"),
        ("s3://bucket/x\n", "control"),
    ):
        with pytest.raises(ValueError, match=why):
            parse_uri(bad)
    with pytest.raises(UnsafeKey):
        parse_uri("s3://bucket/a/./b")
