"""An explorer's page, its routes and their request rules, built from its table of views.

A view (``View``) is the parts of the page it draws, each put in a named place ("main", "side", ...), the callbacks
that fill them (``register(app, state)``), and the request rules of its controls (``rules(state)``). Every function
of a view receives the explorer's state, and nothing else of another view. An explorer is a state object and a
table: ``app.VIEWS`` on a wind tunnel (state ``state.Explorer``), ``lm_app.VIEWS`` on a language model (state
``lm_state.LanguageExplorer``). ``build`` lays the page out from the table (the explorer's ``skeleton`` arranges
the places), registers every view's callbacks and checks every request with every view's rules before a view runs
(``interp/requests.py``); the tests read the same table.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from dash import Dash

from ..requests import guard
from .common import styled_page


def no_rules(_state) -> dict:
    return {}


@dataclass(frozen=True)
class View:
    """One view of an explorer: ``parts`` maps a place of the page to a function ``part(state, at)`` giving the
    component (or list of components) the view puts there, where ``at(place)`` gives what the views put in a place
    inside that part (a panel that holds another view's graph); ``register(app, state)`` adds its callbacks;
    ``rules(state)`` gives the request rule of each control it owns, by (component id, property)."""

    name: str
    parts: dict[str, Callable] = field(default_factory=dict)
    register: Callable = lambda app, state: None
    rules: Callable = no_rules


def layout(state, views, skeleton: Callable):
    """The page: ``skeleton(state, at)`` arranges the places, ``at(place)`` gives the parts the views put there,
    in the table's order. A part put in a place the page does not have is refused (it would not be shown)."""
    asked = set()

    def at(place: str) -> list:
        asked.add(place)
        found = []
        for view in views:
            if place in view.parts:
                made = view.parts[place](state, at)
                found += made if isinstance(made, list) else [made]
        return found

    page = skeleton(state, at)
    unplaced = sorted({place for view in views for place in view.parts} - asked)
    if unplaced:
        raise ValueError(f"the page has no place {', '.join(unplaced)} for the views' parts")
    return page


def rules(state, views) -> dict:
    """Every view's request rules together; a control is one view's, so two views giving it a rule is refused."""
    merged = {}
    for view in views:
        own = view.rules(state)
        twice = sorted(set(own) & set(merged))
        if twice:
            raise ValueError(f"view {view.name!r} gives a rule for {twice}, which another view gives")
        merged |= own
    return merged


def build(state, views, skeleton: Callable, title: str) -> Dash:
    """The Dash app of an explorer: its page, every view's callbacks, every request checked by the views' rules."""
    app = Dash(__name__, title=title)
    styled_page(app)
    app.layout = layout(state, views, skeleton)
    for view in views:
        view.register(app, state)
    guard(app, rules(state, views))
    return app
