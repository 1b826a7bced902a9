"""Placeholder until this page is built."""

from __future__ import annotations

from specdeck.gui.pages import spec
from specdeck.gui.pages.placeholder import PlaceholderPage


def create_page(context):
    page = spec("compat")
    return PlaceholderPage(page.title, page.summary)
