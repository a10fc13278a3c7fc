"""Semantic versions: parse, compare, bump."""

import re

_VERSION = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)(?:-([0-9A-Za-z.-]+))?$")


def parse_version(text):
    """'1.2.3-rc.1' -> (1, 2, 3, 'rc.1'); the pre-release is None when absent; a leading 'v' is allowed."""
    match = _VERSION.match(text.strip())
    if match is None:
        raise ValueError(f"not a semantic version: {text!r}")
    major, minor, patch, pre = match.groups()
    return int(major), int(minor), int(patch), pre


def _pre_key(pre):
    """Pre-release ordering: numeric parts numerically and below text parts; no pre-release ranks highest."""
    if pre is None:
        return (1,)
    parts = []
    for part in pre.split("."):
        parts.append((0, int(part), "") if part.isdigit() else (1, 0, part))
    return (0, parts)


def compare_versions(a, b):
    """-1, 0 or 1 as version `a` is lower than, equal to or higher than `b`."""
    va, vb = parse_version(a), parse_version(b)
    ka = (va[:3], _pre_key(va[3]))
    kb = (vb[:3], _pre_key(vb[3]))
    return (ka > kb) - (ka < kb)


def bump(version, part):
    """The next version: `part` is 'major', 'minor' or 'patch'; lower parts reset, the pre-release goes."""
    major, minor, patch, _ = parse_version(version)
    if part == "major":
        return f"{major + 1}.0.0"
    if part == "minor":
        return f"{major}.{minor + 1}.0"
    if part == "patch":
        return f"{major}.{minor}.{patch + 1}"
    raise ValueError(f"unknown part {part!r}: major, minor or patch")
