from zoneinfo import available_timezones

import pytest
from amsg.domain import timezones
from amsg.domain.timezones import canonical_tz, is_valid_tz


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("Asia/Tokyo", "Asia/Tokyo"),
        ("asia/tokyo", "Asia/Tokyo"),
        ("ASIA/TOKYO", "Asia/Tokyo"),
        ("america/argentina/buenos_aires", "America/Argentina/Buenos_Aires"),
        ("utc", "UTC"),
        ("etc/gmt+5", "Etc/GMT+5"),
        # aliases are kept as aliases (no alias resolution)
        ("us/eastern", "US/Eastern"),
        ("Europe/Kiev", "Europe/Kiev"),
    ],
)
def test_canonical_case(given, expected):
    assert canonical_tz(given) == expected
    assert is_valid_tz(given)


@pytest.mark.parametrize(
    "bad",
    ["", "Nowhere/Fake", "Asia/Tokyo ", " Asia/Tokyo", "localtime", "posixrules", None, 0, 1, True, ["UTC"], {}],
)
def test_unknown_or_not_a_string(bad):
    assert canonical_tz(bad) is None
    assert not is_valid_tz(bad)


def test_every_canonical_key_maps_to_itself():
    for key in available_timezones() - {"localtime", "posixrules"}:
        assert canonical_tz(key) == key
        assert canonical_tz(key.lower()) == key


def test_index_is_built_lazily():
    timezones._lowercase_index.cache_clear()
    assert timezones._lowercase_index.cache_info().currsize == 0
    canonical_tz("UTC")
    assert timezones._lowercase_index.cache_info().currsize == 1
