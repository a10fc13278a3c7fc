import pytest
from textkit import caesar, is_palindrome, rle_decode, rle_encode, word_count, wrap


def test_wrap_greedy():
    assert wrap("the quick brown fox jumps over the lazy dog", 10) == [
        "the quick", "brown fox", "jumps over", "the lazy", "dog",
    ]  # fmt: skip


def test_wrap_exact_width_fits():
    assert wrap("aaaa bbbb", 9) == ["aaaa bbbb"]


def test_wrap_long_word_on_its_own_line():
    assert wrap("a verylongword b", 5) == ["a", "verylongword", "b"]


def test_wrap_empty():
    assert wrap("   ", 5) == []


def test_wrap_rejects_zero_width():
    with pytest.raises(ValueError):
        wrap("a", 0)


def test_word_count_ignores_case_and_punctuation():
    assert word_count("The cat; the hat. THE end!") == {"the": 3, "cat": 1, "hat": 1, "end": 1}


def test_word_count_contractions():
    assert word_count("don't stop, don't") == {"don't": 2, "stop": 1}


def test_rle_encode():
    assert rle_encode("aaabcc") == "3a1b2c"


def test_rle_encode_empty():
    assert rle_encode("") == ""


def test_rle_encode_long_runs():
    assert rle_encode("x" * 12 + "y") == "12x1y"


def test_rle_decode():
    assert rle_decode("3a1b2c") == "aaabcc"


def test_rle_decode_multi_digit_counts():
    assert rle_decode("12x1y") == "x" * 12 + "y"


@pytest.mark.parametrize("text", ["", "a", "abba", "mississippi", "zzzzzzzzzzzzzzzzzzzzzq"])
def test_rle_round_trip(text):
    assert rle_decode(rle_encode(text)) == text


def test_rle_decode_rejects_a_missing_count():
    with pytest.raises(ValueError):
        rle_decode("a2b")


def test_rle_decode_rejects_a_dangling_count():
    with pytest.raises(ValueError):
        rle_decode("2a3")


@pytest.mark.parametrize("text", ["racecar", "A man, a plan, a canal: Panama", "No lemon, no melon", "", "x"])
def test_is_palindrome(text):
    assert is_palindrome(text)


@pytest.mark.parametrize("text", ["hello", "ab", "palindrome"])
def test_is_not_palindrome(text):
    assert not is_palindrome(text)


def test_caesar_shifts_and_wraps():
    assert caesar("xyz", 3) == "abc"


def test_caesar_keeps_case_and_punctuation():
    assert caesar("Hello, World!", 1) == "Ifmmp, Xpsme!"


def test_caesar_negative_shift_undoes():
    assert caesar(caesar("Attack at dawn", 7), -7) == "Attack at dawn"
