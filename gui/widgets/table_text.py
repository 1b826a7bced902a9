"""A table's text by column name: what tests, tools and the pages read instead of column
numbers (a column added or moved then breaks nothing that reads by name)."""

from __future__ import annotations

from PySide6.QtWidgets import QTableWidget


def rows_by_header(table: QTableWidget) -> list[dict[str, str]]:
    """Every row, top to bottom, as {header text: cell text} ("" for an empty cell)."""
    headers = [table.horizontalHeaderItem(c).text() for c in range(table.columnCount())]
    return [{name: (item.text() if (item := table.item(row, column)) is not None else "")
             for column, name in enumerate(headers)}
            for row in range(table.rowCount())]
