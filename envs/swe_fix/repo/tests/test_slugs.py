from textkit import slugify, truncate_words


def test_slugify_lowercases_and_joins_words():
    assert slugify("Hello World") == "hello-world"


def test_slugify_drops_punctuation_runs():
    assert slugify("Hello, World!!  Again") == "hello-world-again"


def test_slugify_strips_accents():
    assert slugify("Crème Brûlée") == "creme-brulee"


def test_slugify_custom_separator():
    assert slugify("a b c", sep="_") == "a_b_c"


def test_slugify_trims_separators_at_the_ends():
    assert slugify("  --Hello--  ") == "hello"


def test_slugify_max_length_does_not_end_on_a_separator():
    assert slugify("one two three", max_length=8) == "one-two"


def test_slugify_keeps_digits():
    assert slugify("Version 2.0 released") == "version-2-0-released"


def test_truncate_words_keeps_short_text():
    assert truncate_words("a b c", 3) == "a b c"


def test_truncate_words_adds_the_ending():
    assert truncate_words("one two three four", 2) == "one two..."


def test_truncate_words_custom_ending():
    assert truncate_words("one two three", 1, ending=" [more]") == "one [more]"
