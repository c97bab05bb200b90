"""The main window: navigation, the shared banner, the engine client, views, persistence."""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import QByteArray, QRect, QSettings, Qt, QTimer
from PySide6.QtGui import QActionGroup, QCloseEvent, QGuiApplication, QKeySequence
from PySide6.QtWidgets import (
    QApplication,
    QFrame,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QMainWindow,
    QProgressBar,
    QScrollArea,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from app.ui.chat_store import ChatStore
from app.ui.elided import ElidedLabel
from app.ui.settings import Settings, SettingsStore
from app.ui.theme import Colors, apply_palette, colors_for
from app.ui.widgets import Banner
from app.ui.worker import EngineClient, ModelState


@dataclass
class AppContext:
    """Objects built once at start-up and passed in (no global singletons)."""

    settings_store: SettingsStore
    settings: Settings
    chat_store: ChatStore
    checkpoint_store: object | None = None  # app.checkpoints.store.Store, built lazily
    autoload: bool = True  # load the configured pair at start


def fit_size(width: int, height: int, area: QRect | None) -> tuple[int, int]:
    """``width`` x ``height``, made no larger than the screen's available ``area``."""
    if area is None or area.isEmpty():
        return width, height
    return min(width, area.width()), min(height, area.height())


def view_page(view: QWidget) -> QScrollArea:
    """A view in the window's stack. A view that needs more room than the window has scrolls
    instead of making the window larger than the screen."""
    page = QScrollArea()
    page.setWidget(view)
    page.setWidgetResizable(True)
    page.setFrameShape(QFrame.Shape.NoFrame)
    return page


class MainWindow(QMainWindow):
    def __init__(self, ctx: AppContext):
        super().__init__()
        from app.demo.builtins import register_demo_models

        register_demo_models()
        self.ctx = ctx
        self.settings = ctx.settings
        self.setWindowTitle("DraftPair")
        self.resize(*fit_size(1360, 860, self._screen_area()))
        self.colors: Colors = colors_for(self.settings.theme)
        self.client = EngineClient(self)
        self.banner = Banner()
        self._closing = False
        self._pending_pair: tuple[str, str] | None = None  # saved only once it has loaded
        try:
            self._build()
        except BaseException:
            self.client.shutdown()  # never leave the engine thread running behind a failure
            raise

    def _build(self) -> None:
        ctx = self.ctx

        from app.ui.chat_view import ChatView
        from app.ui.compare_view import CompareView
        from app.ui.models_view import ModelsView
        from app.ui.view_deps import ViewDeps

        deps = ViewDeps(self.client, self.settings, self.banner, self.colors)
        self.chat = ChatView(deps, ctx.chat_store)
        self.chat.spec_combo.kind_changed.connect(self._show_model_status)
        self.compare = CompareView(deps)
        self.models = ModelsView(deps, ctx)
        self.views: dict[str, QWidget] = {
            "Chat": self.chat, "Compare": self.compare, "Models": self.models,
        }
        self.bench: QWidget | None
        try:
            from app.ui.bench_view import BenchView

            self.bench = BenchView(deps)
            self.views["Bench"] = self.bench
        except ImportError:
            self.bench = None

        self.nav = QListWidget()
        self.nav.setObjectName("nav")
        self.nav.setFixedWidth(128)
        self.stack = QStackedWidget()
        for name, view in self.views.items():
            self.nav.addItem(name)
            self.stack.addWidget(view_page(view))
        self.nav.currentRowChanged.connect(self._on_view_changed)
        brand = QLabel("DraftPair")
        brand.setProperty("role", "title")
        brand.setAlignment(Qt.AlignmentFlag.AlignCenter)
        side = QWidget()
        sv = QVBoxLayout(side)
        sv.setContentsMargins(0, 12, 0, 12)
        sv.addWidget(brand)
        sv.addSpacing(8)
        sv.addWidget(self.nav, 1)
        right = QWidget()
        rv = QVBoxLayout(right)
        rv.setContentsMargins(0, 0, 0, 0)
        rv.setSpacing(0)
        rv.addWidget(self.banner)
        rv.addWidget(self.stack, 1)
        central = QWidget()
        h = QHBoxLayout(central)
        h.setContentsMargins(0, 0, 0, 0)
        h.setSpacing(0)
        h.addWidget(side)
        h.addWidget(right, 1)
        self.setCentralWidget(central)

        self.status_model = ElidedLabel("No model loaded")
        self.busy = QProgressBar()
        self.busy.setRange(0, 0)
        self.busy.setMaximumWidth(120)
        self.busy.setMaximumHeight(14)
        self.busy.hide()
        self.statusBar().addWidget(self.status_model, 1)
        self.statusBar().addPermanentWidget(self.busy)
        from app.ui.server_switch import ServerSwitch

        self.server = ServerSwitch(self)
        self.status_server = QLabel("")
        self.status_server.setObjectName("status_server")
        self.status_server.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.statusBar().addPermanentWidget(self.status_server)
        self.server.url_changed.connect(self._on_server_url)
        self.server.failed.connect(self._on_server_failed)

        w = self.client
        w.loading.connect(self._on_loading)
        w.model_state.connect(self._on_state)
        w.load_failed.connect(self._on_load_failed)
        self.chat.settings_changed.connect(self.schedule_save)
        self.chat.go_to_models.connect(lambda: self.show_view("Models"))
        self.models.use_pair.connect(self._use_pair)
        self.chat.draft_section.use_pair.connect(self._use_pair)  # the Chat sidebar's picker
        self.chat.draft_section.store_of = lambda: self.ctx.checkpoint_store

        from app.ui.gui_gc import GuiThreadCollection

        self._collection = GuiThreadCollection(self)  # cycles freed here, never on the engine thread
        self._save_timer = QTimer(self)
        self._save_timer.setSingleShot(True)
        self._save_timer.setInterval(500)  # throttle bursts of edits into one write
        self._save_timer.timeout.connect(self.save_settings)
        hints = QGuiApplication.styleHints()
        hints.colorSchemeChanged.connect(self._on_scheme_changed)

        self._build_menus()
        self._restore_geometry()
        self.nav.setCurrentRow(0)
        problems = [ctx.settings_store.problem, getattr(ctx.chat_store, "problem", None)]
        if any(problems):
            self.banner.show_message(" ".join(p for p in problems if p), error=True)
        if ctx.autoload:
            QTimer.singleShot(0, self, self.load_configured_pair)

    def _build_menus(self) -> None:
        bar = self.menuBar()
        file_menu = bar.addMenu("&File")
        export = file_menu.addAction("Export conversation as Markdown…")
        export.triggered.connect(lambda: self.chat.export_markdown())
        imp = file_menu.addAction("Import model folder…")
        imp.triggered.connect(self._import_model_folder)
        file_menu.addSeparator()
        quit_action = file_menu.addAction("Quit")
        quit_action.setShortcut(QKeySequence.StandardKey.Quit)
        quit_action.triggered.connect(self.close)
        view_menu = bar.addMenu("&View")
        theme_menu = view_menu.addMenu("Theme")
        group = QActionGroup(self)
        for key, label in (("system", "Follow the system"), ("light", "Light"), ("dark", "Dark")):
            act = theme_menu.addAction(label)
            act.setCheckable(True)
            act.setChecked(self.settings.theme == key)
            act.triggered.connect(lambda _c=False, k=key: self.set_theme(k))
            group.addAction(act)
        view_menu.addSeparator()
        ctrl_enter = view_menu.addAction("Send chat messages with Ctrl+Enter")
        ctrl_enter.setCheckable(True)
        ctrl_enter.setChecked(self.settings.send_key == "ctrl-enter")
        ctrl_enter.setToolTip("Off: Enter sends and Shift+Enter starts a new line. On: Enter starts "
                              "a new line and Ctrl+Enter sends.")
        ctrl_enter.toggled.connect(self._on_send_key_toggled)
        self.send_key_action = ctrl_enter
        view_menu.addSeparator()
        for i, name in enumerate(self.views):
            act = view_menu.addAction(name)
            act.setShortcut(QKeySequence(f"Ctrl+{i + 1}"))
            act.triggered.connect(lambda _c=False, n=name: self.show_view(n))
        server_menu = bar.addMenu("&Server")
        self.server_action = server_menu.addAction("Serve the loaded pair (OpenAI API)")
        self.server_action.setCheckable(True)
        self.server_action.setToolTip("draftpair serve on 127.0.0.1: a second process that "
                                      "loads its own copy of the pair")
        self.server_action.toggled.connect(self._toggle_server)
        help_menu = bar.addMenu("&Help")
        keys = help_menu.addAction("Keyboard shortcuts")
        keys.triggered.connect(
            lambda: self.banner.show_message(
                "Enter sends in Chat (Shift+Enter: new line; Ctrl+Enter if chosen in View) · "
                "Ctrl+Enter runs Compare · Esc stops · Ctrl+1…"
                f"{len(self.views)} switch views · Ctrl+Q quits.",
                timeout_ms=10000,
            )
        )

    # -- models ------------------------------------------------------------------------------
    def load_configured_pair(self) -> None:
        draft = self.settings.draft
        if draft == "demo-draft":
            from app.demo.target import demo_draft_available

            if not demo_draft_available():
                draft = ""
        self.load_pair(self.settings.target or "demo", draft)

    def load_pair(self, target: str, draft: str) -> None:
        self.busy.show()
        self.status_model.setText("Loading…")
        self.client.load(target, draft)
        self.chat.on_loading("Loading models…")

    def _use_pair(self, target: str, draft: str) -> None:
        if self.client.generating:
            self.banner.show_message("Stop the running reply before switching models.", error=True)
            return
        self._pending_pair = (target, draft)  # a pair that fails to load is never restored
        self.load_pair(target, draft)
        self.show_view("Chat")

    def _on_loading(self, text: str) -> None:
        self.status_model.setText(text)
        self.chat.on_loading(text)

    def _on_state(self, state: ModelState) -> None:
        self.busy.hide()
        pending, self._pending_pair = self._pending_pair, None
        if pending is not None and state.target:
            self.settings.target, self.settings.draft = pending
            self.schedule_save()
        self._show_model_status()
        for view in self.views.values():
            handler = getattr(view, "on_model_state", None)
            if handler is not None:
                handler(state)

    def _show_model_status(self, *_: object) -> None:
        """What is loaded and the drafter the chat uses now (it follows the chat's kind)."""
        from app.ui.status_line import model_status

        text, tip = model_status(self.client.state, self.chat.spec_combo.kind())
        self.status_model.setText(text)
        self.status_model.setToolTip(tip)

    def _on_load_failed(self, message: str) -> None:
        self._pending_pair = None  # keep the selection that last loaded
        self.busy.hide()
        self.banner.show_message(message, error=True)

    # -- server ------------------------------------------------------------------------------
    def _toggle_server(self, on: bool) -> None:
        if not on:
            self.server.stop()
            self.status_server.setText("")
            return
        state = self.client.state
        if not state.target_path:
            self.banner.show_message("Load a model first, then start the server.", error=True)
            self.server_action.setChecked(False)
            return
        self.status_server.setText("Server: starting…")
        self.server.start(state.target_path, state.draft_path or "")

    def _on_server_url(self, url: str) -> None:
        self.status_server.setText(f"Server: {url}/v1" if url else "")

    def _on_server_failed(self, message: str) -> None:
        self.banner.show_message(message, error=True)
        self.status_server.setText("")
        self.server_action.setChecked(False)

    def show_view(self, name: str) -> None:
        self.nav.setCurrentRow(list(self.views).index(name))

    def _import_model_folder(self) -> None:
        self.show_view("Models")
        self.models.import_folder()

    def _on_view_changed(self, row: int) -> None:
        self.stack.setCurrentIndex(row)
        if self.stack.currentWidget() is not None and list(self.views)[row] == "Chat":
            self.chat.focus_input()  # back in Chat: type at once

    def _on_send_key_toggled(self, on: bool) -> None:
        self.chat.set_send_key("ctrl-enter" if on else "enter")
        self.schedule_save()

    def _screen_area(self) -> QRect | None:
        screen = self.screen() or QGuiApplication.primaryScreen()
        return screen.availableGeometry() if screen is not None else None

    # -- theme -------------------------------------------------------------------------------
    def set_theme(self, theme: str) -> None:
        self.settings.theme = theme
        self.apply_theme()
        self.schedule_save()

    def _on_scheme_changed(self, _scheme: object) -> None:
        if self.settings.theme == "system":
            self.apply_theme()

    def apply_theme(self) -> None:
        self.colors = colors_for(self.settings.theme)
        app = QApplication.instance()
        if isinstance(app, QApplication):
            apply_palette(app, self.colors)
        for view in self.views.values():
            handler = getattr(view, "apply_colors", None)
            if handler is not None:
                handler(self.colors)

    # -- persistence ---------------------------------------------------------------------------
    def schedule_save(self) -> None:
        self._save_timer.start()

    def save_settings(self) -> None:
        try:
            self.ctx.settings_store.save(self.settings)
        except OSError as exc:
            self.banner.show_message(f"Settings could not be saved: {exc.strerror}.", error=True)

    def _qsettings(self) -> QSettings:
        # next to settings.json, so a config-folder override or a profile folder holds both
        path = self.ctx.settings_store.path.parent / "window.ini"
        return QSettings(str(path), QSettings.Format.IniFormat)

    def _restore_geometry(self) -> None:
        geo = self._qsettings().value("window/geometry")
        if isinstance(geo, QByteArray):
            self.restoreGeometry(geo)
        area = self._screen_area()  # saved on a larger screen: never more than this one
        if area is not None and not self.isMaximized() and not self.isFullScreen():
            w, h = fit_size(self.width(), self.height(), area)
            if (w, h) != (self.width(), self.height()):
                self.resize(w, h)

    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802 (Qt override)
        if not self._closing:
            self._closing = True
            self._qsettings().setValue("window/geometry", self.saveGeometry())
            self._save_timer.stop()
            self.save_settings()
            for view in self.views.values():
                handler = getattr(view, "shutdown", None)
                if handler is not None:
                    handler()
            self.server.stop()
            self.client.shutdown()
            self._collection.stop()
        super().closeEvent(event)
