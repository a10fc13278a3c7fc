import pytest
from textkit import bump, compare_versions, parse_version


def test_parse_version():
    assert parse_version("1.2.3") == (1, 2, 3, None)


def test_parse_version_prerelease_and_prefix():
    assert parse_version("v2.0.0-rc.1") == (2, 0, 0, "rc.1")


@pytest.mark.parametrize("bad", ["1.2", "1.2.3.4", "a.b.c", "", "1.2.3-"])
def test_parse_version_rejects(bad):
    with pytest.raises(ValueError):
        parse_version(bad)


@pytest.mark.parametrize(
    ("a", "b", "result"),
    [
        ("1.0.0", "1.0.0", 0),
        ("1.0.0", "2.0.0", -1),
        ("1.10.0", "1.9.0", 1),
        ("1.0.10", "1.0.9", 1),
        ("0.9.9", "1.0.0", -1),
    ],
)
def test_compare_versions(a, b, result):
    assert compare_versions(a, b) == result


def test_a_prerelease_is_lower_than_its_release():
    assert compare_versions("1.0.0-alpha", "1.0.0") == -1
    assert compare_versions("1.0.0", "1.0.0-rc.1") == 1


def test_prerelease_order():
    ordered = [
        "1.0.0-alpha",
        "1.0.0-alpha.1",
        "1.0.0-alpha.beta",
        "1.0.0-beta",
        "1.0.0-beta.2",
        "1.0.0-beta.11",
        "1.0.0-rc.1",
        "1.0.0",
    ]
    for i in range(len(ordered) - 1):
        assert compare_versions(ordered[i], ordered[i + 1]) == -1, ordered[i : i + 2]


def test_bump_parts():
    assert bump("1.2.3", "patch") == "1.2.4"
    assert bump("1.2.3", "minor") == "1.3.0"
    assert bump("1.2.3", "major") == "2.0.0"


def test_bump_drops_the_prerelease():
    assert bump("1.2.3-rc.1", "patch") == "1.2.4"


def test_bump_unknown_part():
    with pytest.raises(ValueError):
        bump("1.2.3", "build")
