"""Light and dark palettes (Fusion), following the system colour scheme unless forced."""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QGuiApplication, QPalette
from PySide6.QtWidgets import QApplication


@dataclass(frozen=True)
class Colors:
    dark: bool
    window: str
    base: str
    alt_base: str
    text: str
    muted: str
    accent: str
    accent_text: str
    border: str
    draft_bg: str  # highlight of accepted draft tokens
    user_bg: str
    off_run: str  # compare: speculation off
    on_run: str  # compare: speculation on
    mem_mlx: str
    mem_rss: str
    mem_sys: str
    mem_swap: str
    ok: str
    warn: str
    bad: str
    banner_error: str
    banner_info: str


LIGHT = Colors(
    dark=False, window="#f4f5f7", base="#ffffff", alt_base="#eef0f3", text="#1d2127",
    muted="#5f6773", accent="#2f6fdf", accent_text="#ffffff", border="#d5d9df",
    draft_bg="#cdeccf", user_bg="#e8eefb", off_run="#7a8390", on_run="#2f6fdf",
    mem_mlx="#2f6fdf", mem_rss="#d9822b", mem_sys="#8e5bd0", mem_swap="#c23b3b",
    ok="#2e8540", warn="#b7791f", bad="#c23b3b", banner_error="#fde8e8", banner_info="#e8f0fd",
)  # fmt: skip

DARK = Colors(
    dark=True, window="#1e2126", base="#16181c", alt_base="#23272e", text="#e3e6ea",
    muted="#9aa3ae", accent="#5b9bff", accent_text="#0c1017", border="#363b44",
    draft_bg="#1f4a2c", user_bg="#243049", off_run="#9aa3ae", on_run="#5b9bff",
    mem_mlx="#5b9bff", mem_rss="#f0a050", mem_sys="#b48cf0", mem_swap="#f07070",
    ok="#5cc878", warn="#e0b050", bad="#f07070", banner_error="#4a2326", banner_info="#22324d",
)  # fmt: skip


def system_prefers_dark() -> bool:
    hints = QGuiApplication.styleHints()
    return hints.colorScheme() == Qt.ColorScheme.Dark


def colors_for(theme: str) -> Colors:
    if theme == "dark":
        return DARK
    if theme == "light":
        return LIGHT
    return DARK if system_prefers_dark() else LIGHT


def apply_palette(app: QApplication, c: Colors) -> None:
    app.setStyle("Fusion")
    p = QPalette()
    role = QPalette.ColorRole
    p.setColor(role.Window, QColor(c.window))
    p.setColor(role.WindowText, QColor(c.text))
    p.setColor(role.Base, QColor(c.base))
    p.setColor(role.AlternateBase, QColor(c.alt_base))
    p.setColor(role.Text, QColor(c.text))
    p.setColor(role.Button, QColor(c.alt_base))
    p.setColor(role.ButtonText, QColor(c.text))
    p.setColor(role.Highlight, QColor(c.accent))
    p.setColor(role.HighlightedText, QColor(c.accent_text))
    p.setColor(role.ToolTipBase, QColor(c.base))
    p.setColor(role.ToolTipText, QColor(c.text))
    p.setColor(role.PlaceholderText, QColor(c.muted))
    p.setColor(role.Link, QColor(c.accent))
    p.setColor(role.Mid, QColor(c.border))
    p.setColor(role.Midlight, QColor(c.border))
    p.setColor(role.Light, QColor(c.alt_base))
    p.setColor(role.Dark, QColor(c.border))
    for r in (role.Text, role.WindowText, role.ButtonText):
        p.setColor(QPalette.ColorGroup.Disabled, r, QColor(c.muted))
    app.setPalette(p)
    app.setStyleSheet(stylesheet(c))


def stylesheet(c: Colors) -> str:
    return f"""
QToolTip {{ color: {c.text}; background: {c.base}; border: 1px solid {c.border}; padding: 4px; }}
QLabel[role="muted"] {{ color: {c.muted}; }}
QLabel[role="title"] {{ font-size: 15px; font-weight: 600; }}
QLabel[role="stats"] {{ color: {c.muted}; font-size: 12px; }}
QFrame[role="card"] {{ background: {c.base}; border: 1px solid {c.border}; border-radius: 8px; }}
QFrame[role="banner-error"] {{ background: {c.banner_error}; border: 1px solid {c.bad};
    border-radius: 6px; }}
QFrame[role="banner-info"] {{ background: {c.banner_info}; border: 1px solid {c.accent};
    border-radius: 6px; }}
QLabel[badge="ok"] {{ color: {c.ok}; font-weight: 600; }}
QLabel[badge="warn"] {{ color: {c.warn}; font-weight: 600; }}
QLabel[badge="bad"] {{ color: {c.bad}; font-weight: 600; }}
QPushButton[role="primary"] {{ background: {c.accent}; color: {c.accent_text}; border: none;
    border-radius: 5px; padding: 6px 16px; font-weight: 600; }}
QPushButton[role="primary"]:disabled {{ background: {c.border}; color: {c.muted}; }}
QPushButton[role="danger"] {{ color: {c.bad}; }}
QListWidget#nav {{ background: {c.alt_base}; border: none; font-size: 14px; outline: 0; }}
QListWidget#nav::item {{ padding: 10px 14px; border-radius: 6px; margin: 2px 6px; }}
QListWidget#nav::item:selected {{ background: {c.accent}; color: {c.accent_text}; }}
QListWidget#conversations::item {{ padding: 5px 4px; }}
QListWidget#hub_results::item {{ padding: 4px 2px; }}
QTextBrowser, QPlainTextEdit, QTextEdit {{ border: 1px solid {c.border}; border-radius: 6px; }}
"""
