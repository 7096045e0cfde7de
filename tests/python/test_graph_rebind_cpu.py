"""The rules by which a CUDA graph's words are told apart when it is rebound to new argument
addresses (csrc/runtime/graphs/rebind_words.h, used by graph_rebind.h): from a word's values in three
captures, one with the arguments where the caller has them and two with argument i moved by s_i and
2 s_i. Only an address that followed exactly one argument is rewritten; an address that moved some
other way, or stayed inside an argument, stops the plan; the graph's own memory and uninitialized
bytes are left alone."""
import pytest

from trident import _C

S = 0x100010000  # the unit shift the runtime uses: argument i moves by (i + 1) * S
A, A_LEN = 0x7F0000000000, 0x20000
B, B_LEN = A + A_LEN, 0x1000  # allocated right after A: A's one-past address is B's first
ARGS = [(A, A_LEN, S), (B, B_LEN, 2 * S)]
POOL = [(0x7E0000000000, 0x7E0000100000)]


def kind(va, vb, vc):
    return _C._rebind_word(va, vb, vc, ARGS, POOL)


def moved(addr, arg):
    shift = ARGS[arg][2]
    return addr, addr + shift, addr + 2 * shift


def test_an_address_inside_an_argument_that_follows_it_is_a_site_with_its_offset():
    assert kind(*moved(A + 0x100, 0)) == ("site", 0, 0x100)
    assert kind(*moved(B + 8, 1)) == ("site", 1, 8)


def test_adjacent_arguments_are_told_apart_by_which_shift_the_address_followed():
    assert kind(*moved(B, 1)) == ("site", 1, 0)            # B's first byte is also A's end
    assert kind(*moved(A + A_LEN, 0)) == ("site", 0, A_LEN)  # A's one-past pointer, moving with A


def test_the_graphs_own_memory_and_constants_are_left_alone():
    assert kind(POOL[0][0] + 8, POOL[0][0] + 0x800, POOL[0][0] + 0x1000)[0] == "pool"
    assert kind(128, 128, 128)[0] == "unmoved"


def test_an_address_that_stayed_inside_an_argument_stops_the_plan():
    assert kind(A + 0x40, A + 0x40, A + 0x40)[0] == "stuck"


@pytest.mark.parametrize("encode", [
    lambda a: a >> 4,                                # an address shifted into a descriptor's field
    lambda a: (a << 2) & (2**64 - 1),
    lambda a: (a & 0xFFFFFFFF) | (7 << 32),          # an address truncated to 32 bits, beside a field
    lambda a: (a + 0x7000) & (2**64 - 1),            # moved the right amount but outside the argument
])
def test_a_word_that_moves_with_the_shifts_but_is_not_an_address_stops_the_plan(encode):
    va, vb, vc = (encode(x) for x in moved(A + 0x1000 + A_LEN, 0))
    assert kind(va, vb, vc)[0] == "encoded"


def test_a_difference_of_two_arguments_addresses_stops_the_plan():
    va, vb, vc = ((b - a) for a, b in zip(moved(A, 0), moved(B, 1)))
    assert kind(va, vb, vc)[0] == "encoded"


def test_bytes_that_change_in_no_relation_to_the_shifts_are_uninitialized_and_left_alone():
    assert kind(0x7FFC00000927, 0x7FFC000009A9, 0x7FFC00000A2B)[0] == "no_shift"  # a host counter's leftovers
    assert kind(0x200, 0x0, 0x5)[0] == "no_shift"


def test_bad_arguments_raise_type_errors():
    with pytest.raises(TypeError):
        _C._rebind_word(1, 2, 3, [(1, 2)], POOL)
    with pytest.raises(TypeError):
        _C._rebind_word(1, 2, 3, ARGS, 5)
