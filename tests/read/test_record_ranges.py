"""`Dataset.read_records(start, stop)` refuses a bad range saying which bound is wrong
(issue 28 #19): past the end names the record count; a stop below the start (a count
given for a stop) says the range is half-open."""

import pytest

import loader
from loader.errors import UsageError


@pytest.fixture(scope="module")
def uri(tmp_path_factory):
    u = f"lmdb://{tmp_path_factory.mktemp('r')}/ds"
    loader.load("gen://scidb96?n=1000", u, shards=1, workers=1)
    return u


@pytest.mark.parametrize(
    "start, stop, message",
    [
        (
            990,
            20,
            "record range 990..20: stop is below start (the range is half-open [start, stop), not "
            "(start, count)); 990..1,010 would go past the end: {uri} holds 1,000 records (indices 0..999)",
        ),
        (10, 5, "for 5 records from 10 use read_records(10, 15)"),
        (
            990,
            1010,
            "record range 990..1,010 goes past the end: {uri} holds 1,000 records (indices 0..999); "
            "read at most to 1,000",
        ),
        (1001, None, "record range 1,001..1,000 starts past the end"),
        (-1, 5, "record range -1..5 has a negative bound"),
    ],
)
def test_a_bad_record_range_says_which_bound_is_wrong(uri, start, stop, message):
    with loader.open(uri) as ds:
        with pytest.raises(UsageError) as e:
            ds.read_records(start, stop)
        assert message.format(uri=uri) in str(e.value)
        assert len(ds.read_records(990, 1000)) == 10 and len(ds.read_records(1000)) == 0
