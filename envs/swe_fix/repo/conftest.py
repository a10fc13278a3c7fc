"""Lets the tests import `textkit` from this folder, however pytest is started."""
