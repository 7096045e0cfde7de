"""A Python int used as an index (a decode position) is symbolic like a size: one specialization
serves every position (two: export specializes the first value seen, 0 or 1), for reads
(`cos[pos]`, `cache[:, :, pos]`) and writes (`cache[:, :, pos] = k`), with the range the index
needs guarded."""
import pytest
import torch

import trident


def _write_then_read(cache, k, pos):
    cache[:, :, pos] = k
    return cache[:, :, pos] * 2 + cache.sum()


def _read_rows(table, x, pos):
    return x * table[pos] + table[pos, 1:3].sum() + table[1:, pos].sum()


def _fill_number(cache, pos):
    cache[pos, :] = 0.5
    cache[:, pos] = pos
    return cache


@pytest.mark.parametrize("dynamic, most", [(None, 2), (True, 1)])
def test_a_decode_position_written_and_read_as_an_index_compiles_at_most_twice(dynamic, most):
    fast = trident.compile(_write_then_read, dynamic=dynamic)
    ours, theirs = torch.zeros(1, 2, 64, 8), torch.zeros(1, 2, 64, 8)
    gen = torch.Generator().manual_seed(0)
    for pos in range(64):
        k = torch.randn(1, 2, 8, generator=gen)
        got, want = fast(ours, k, pos), _write_then_read(theirs, k, pos)
        assert torch.equal(got, want) and torch.equal(ours, theirs), pos
    c = trident.counters(fast)
    assert c["compiles"] <= most and c["hits"] == 64 - c["compiles"] and c["fallbacks"] == 0, c


def test_reads_of_a_table_at_a_symbolic_row_and_column():
    fast = trident.compile(_read_rows)
    table = torch.arange(40.0).reshape(8, 5)
    for pos in [0, 1, 2, 4, 3, 0]:
        assert torch.equal(fast(table, torch.ones(5), pos), _read_rows(table, torch.ones(5), pos)), pos
    assert trident.counters(fast)["compiles"] == 2


def test_numbers_assigned_at_a_symbolic_index():
    fast = trident.compile(_fill_number)
    for pos in [0, 1, 2, 3]:
        a, b = torch.ones(4, 4), torch.ones(4, 4)
        assert torch.equal(fast(a, pos), _fill_number(b, pos)) and torch.equal(a, b), pos
    assert trident.counters(fast)["compiles"] == 2


def test_negative_and_out_of_range_positions_behave_as_eager():
    fast = trident.compile(_write_then_read)
    k = torch.ones(1, 2, 8)
    for pos in [0, 3, 5, -1, -4, 7]:
        a, b = torch.zeros(1, 2, 8, 8), torch.zeros(1, 2, 8, 8)
        assert torch.equal(fast(a, k, pos), _write_then_read(b, k, pos)) and torch.equal(a, b), pos
    # 0 as a constant (export specializes 0 and 1), 3 with the position symbolic (5 and 7 hit it);
    # a negative position is outside the symbol's range: compiled for its value, not run eagerly
    c = trident.counters(fast)
    assert (c["compiles"], c["hits"], c["fallbacks"]) == (4, 2, 0), c
    with pytest.raises(IndexError, match="out of range|out of bounds"):
        fast(torch.zeros(1, 2, 8, 8), k, 8)
    assert torch.equal(fast(torch.zeros(1, 2, 8, 8), k, 6), _write_then_read(torch.zeros(1, 2, 8, 8), k, 6))
