"""The dashboard's pages. Importing any of them builds the Dash app first (register_page needs it)."""

from dashboard.app import get_dash_app

get_dash_app()
