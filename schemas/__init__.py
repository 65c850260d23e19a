"""Shipped schemas: layout declarations (*.toml) and Cap'n Proto schemas (*.capnp).

This directory is installed as the package ``loader.schemas`` so that the
schemas are package data, loaded with explicit paths (never from the CWD).
"""
