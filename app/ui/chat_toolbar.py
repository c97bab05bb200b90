"""The chat's top bar: the loaded models, how replies are sped up, the draft width, highlighting.

Its items wrap onto a second row when the window is narrow (``FlowLayout``) and the model
line is elided (full text in its tooltip), so the bar never makes the window wider.
"""

from __future__ import annotations

from PySide6.QtWidgets import (
    QCheckBox,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSpinBox,
    QToolButton,
    QWidget,
)

from app.ui.elided import ElidedLabel
from app.ui.flow_layout import FlowLayout
from app.ui.widgets import SpecCombo


def _pair(label: str, widget: QWidget) -> QWidget:
    """A label and its control kept together on one row."""
    box = QWidget()
    row = QHBoxLayout(box)
    row.setContentsMargins(0, 0, 0, 0)
    row.setSpacing(4)
    row.addWidget(QLabel(label))
    row.addWidget(widget)
    return box


class ChatToolbar(QWidget):
    def __init__(self, *, kind: str, width: int, highlight: bool, parent: QWidget | None = None):
        super().__init__(parent)
        self.model_label = ElidedLabel("No model loaded")
        self.model_label.setObjectName("model_line")
        self.change_btn = QPushButton("Change models…")
        self.change_btn.setFlat(True)
        self.spec_combo = SpecCombo()
        self.spec_combo.set_kind(kind)
        self.width_spin = QSpinBox()
        self.width_spin.setRange(0, 64)
        self.width_spin.setSpecialValueText("auto")
        self.width_spin.setValue(width)
        self.width_spin.setToolTip(
            "Draft width: tokens proposed per round (auto: 4 for a draft model, 7 for prompt lookup)"
        )
        self.highlight_box = QCheckBox("Highlight drafts")
        self.highlight_box.setToolTip("Show the draft tokens the model accepted on a green background")
        self.highlight_box.setChecked(highlight)
        self.settings_btn = QToolButton()
        self.settings_btn.setText("Reply settings")
        self.settings_btn.setCheckable(True)
        self.settings_btn.setToolTip("Show or hide the draft choice and the reply settings "
                                     "(hidden by themselves when the window is narrow)")
        flow = FlowLayout(self)
        flow.addWidget(self.model_label)
        flow.addWidget(self.change_btn)
        flow.add_stretch()
        flow.addWidget(_pair("Speculation", self.spec_combo))
        flow.addWidget(_pair("Width", self.width_spin))
        flow.addWidget(self.highlight_box)
        flow.addWidget(self.settings_btn)
