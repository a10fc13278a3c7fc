import pytest
from textkit import camel_case, kebab_case, snake_case, title_case


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("HTTPServerError", "http_server_error"),
        ("someVariableName", "some_variable_name"),
        ("some text here", "some_text_here"),
        ("already_snake", "already_snake"),
        ("version2Update", "version2_update"),
    ],
)
def test_snake_case(text, expected):
    assert snake_case(text) == expected


def test_kebab_case():
    assert kebab_case("someVariableName") == "some-variable-name"


def test_kebab_case_of_acronyms():
    assert kebab_case("parseHTMLPage") == "parse-html-page"


def test_camel_case():
    assert camel_case("some_variable_name") == "someVariableName"


def test_camel_case_upper_first():
    assert camel_case("some variable name", upper_first=True) == "SomeVariableName"


def test_camel_case_of_nothing():
    assert camel_case("") == ""


def test_title_case_keeps_small_words_lower():
    assert title_case("the lord of the rings") == "The Lord of the Rings"


def test_title_case_capitalizes_a_small_last_word():
    assert title_case("what are you waiting for") == "What Are You Waiting For"


def test_title_case_lowercases_the_rest_of_a_word():
    assert title_case("hELLO wORLD") == "Hello World"
