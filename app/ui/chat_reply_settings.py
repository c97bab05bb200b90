"""The Chat view's right column: (the draft picker,) system prompt, presets, temperature,
top-p, max tokens."""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QInputDialog,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.engine.context import POLICY_LABELS
from app.ui.settings import Preset, Settings


class ReplySettingsPanel(QWidget):
    """Edits ``settings`` in place; ``changed`` after every edit, ``system_changed(text)`` too
    when the system prompt changed."""

    changed = Signal()
    system_changed = Signal(str)

    def __init__(
        self, settings: Settings, parent: QWidget | None = None, *, top: QWidget | None = None
    ):
        super().__init__(parent)
        self.settings = s = settings
        self.system_edit = QPlainTextEdit(s.system_prompt)
        self.system_edit.setObjectName("system_prompt")
        self.system_edit.setPlaceholderText("Optional instructions for the model")
        self.system_edit.setFixedHeight(110)
        self.system_edit.textChanged.connect(self._on_system_changed)
        self.preset_combo = QComboBox()
        self._fill_presets()
        self.preset_combo.activated.connect(self._apply_preset)
        save_preset = QPushButton("Save as preset…")
        save_preset.clicked.connect(self.save_preset)
        self.temp_spin = QDoubleSpinBox()
        self.temp_spin.setRange(0.0, 2.0)
        self.temp_spin.setSingleStep(0.1)
        self.temp_spin.setDecimals(2)
        self.temp_spin.setValue(s.temperature)
        self.temp_spin.setToolTip("0 = greedy (always the most likely token)")
        self.top_p_spin = QDoubleSpinBox()
        self.top_p_spin.setRange(0.05, 1.0)
        self.top_p_spin.setSingleStep(0.05)
        self.top_p_spin.setValue(s.top_p)
        self.max_spin = QSpinBox()
        self.max_spin.setRange(1, 32768)
        self.max_spin.setValue(s.max_tokens)
        for w in (self.temp_spin, self.top_p_spin, self.max_spin):
            w.valueChanged.connect(self._on_sampling_changed)
        self.policy_combo = QComboBox()
        self.policy_combo.setObjectName("context_policy")
        for key, label in POLICY_LABELS.items():
            self.policy_combo.addItem(label, key)
        self.policy_combo.setCurrentIndex(max(0, self.policy_combo.findData(s.context_policy)))
        self.policy_combo.setToolTip("What happens when a chat no longer fits the model's context")
        self.policy_combo.currentIndexChanged.connect(self._on_policy_changed)
        self.policy_combo.currentIndexChanged.connect(
            lambda _i: self.policy_combo.setToolTip(self.policy_combo.currentText()))
        for combo in (self.preset_combo, self.policy_combo):  # long items never widen the column
            combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
            combo.setMinimumContentsLength(12)
        self.template_label = QLabel("")
        self.template_label.setProperty("role", "muted")
        self.template_label.setWordWrap(True)
        right_v = QVBoxLayout(self)
        right_v.setContentsMargins(0, 0, 0, 0)
        if top is not None:  # the draft picker sits above the reply settings
            right_v.addWidget(top)
        form = QFormLayout()
        right_v.addLayout(form)
        right_v.addStretch(1)
        hdr = QLabel("Reply settings")
        hdr.setProperty("role", "title")
        form.addRow(hdr)
        form.addRow(QLabel("System prompt"))
        form.addRow(self.system_edit)
        form.addRow("Preset", self.preset_combo)
        form.addRow("", save_preset)
        form.addRow("Temperature", self.temp_spin)
        form.addRow("Top-p", self.top_p_spin)
        form.addRow("Max tokens", self.max_spin)
        form.addRow(QLabel("When a chat is too long"))
        form.addRow(self.policy_combo)
        form.addRow(self.template_label)
        self.setMinimumWidth(230)
        self.setMaximumWidth(300)

    def set_system_prompt(self, text: str) -> None:
        """Show a conversation's own system prompt (not an edit)."""
        self.system_edit.blockSignals(True)
        self.system_edit.setPlainText(text)
        self.system_edit.blockSignals(False)

    def _fill_presets(self) -> None:
        self.preset_combo.clear()
        self.preset_combo.addItem("Custom", None)
        for p in self.settings.presets:
            self.preset_combo.addItem(
                f"{p.name} (T {p.temperature:g}, top-p {p.top_p:g}, {p.max_tokens} tok)", p
            )

    def _on_system_changed(self) -> None:
        text = self.system_edit.toPlainText()
        self.settings.system_prompt = text
        self.system_changed.emit(text)
        self.changed.emit()

    def _on_policy_changed(self) -> None:
        self.settings.context_policy = self.policy_combo.currentData()
        self.changed.emit()

    def _on_sampling_changed(self) -> None:
        self.settings.temperature = self.temp_spin.value()
        self.settings.top_p = self.top_p_spin.value()
        self.settings.max_tokens = self.max_spin.value()
        p = self.preset_combo.currentData()
        if p is not None and (p.temperature, p.top_p, p.max_tokens) != (
            self.settings.temperature, self.settings.top_p, self.settings.max_tokens
        ):
            self.preset_combo.setCurrentIndex(0)
        self.changed.emit()

    def _apply_preset(self, index: int) -> None:
        p = self.preset_combo.itemData(index)
        if p is None:
            return
        for w, v in ((self.temp_spin, p.temperature), (self.top_p_spin, p.top_p),
                     (self.max_spin, p.max_tokens)):
            w.blockSignals(True)
            w.setValue(v)
            w.blockSignals(False)
        self._on_sampling_changed()
        self.preset_combo.setCurrentIndex(index)

    def save_preset(self, name: str | None = None) -> None:
        if name is None:
            name, ok = QInputDialog.getText(self, "Save preset", "Preset name:")
            if not ok:
                return
        name = name.strip()
        if not name:
            return
        preset = Preset(name, self.temp_spin.value(), self.top_p_spin.value(), self.max_spin.value())
        self.settings.presets = [p for p in self.settings.presets if p.name != name] + [preset]
        self._fill_presets()
        self.preset_combo.setCurrentIndex(self.preset_combo.count() - 1)
        self.changed.emit()
