"""Editing, deleting and regenerating single messages of a chat (the links under each one).

Edit puts the message's text in the message box; Send saves it in place (a refused message
edited is no longer refused, and when it is the chat's last message its reply starts at once).
Delete removes a message (a message of the person takes its reply with it). Regenerate
replaces a reply and everything after it with a new reply. Every change is written to the
chat store at once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from app.ui.chat_store import Message

if TYPE_CHECKING:
    from app.ui.chat_view import ChatView


class MessageActions:
    def __init__(self, view: ChatView):
        self.view = view
        self.editing: Message | None = None
        self._draft = ""  # what the box held before an edit began
        view.transcript.action.connect(self.run)

    def _find(self, msg_id: int) -> Message | None:
        return next((m for m in self.view._messages() if m.id == msg_id), None)

    def run(self, name: str, msg_id: int) -> None:
        v = self.view
        if v.job is not None:
            v.banner.show_message("Stop the running reply first, then change the chat.",
                                  timeout_ms=5000)
            return
        handler = {"edit": self.edit, "delete": self.delete, "regenerate": self.regenerate,
                   "resend": self.resend}.get(name)
        if handler is not None:
            handler(msg_id)

    # -- edit -------------------------------------------------------------------------------
    def edit(self, msg_id: int) -> None:
        m = self._find(msg_id)
        if m is None:
            return
        v = self.view
        if self.editing is None:
            self._draft = v.input.toPlainText()
        self.editing = m
        v.input.setPlainText(m.content)
        v.input_area.show_edit(m.role)
        v.focus_input()
        v._update_buttons()

    def cancel_edit(self) -> None:
        if self.editing is None:
            return
        v = self.view
        self.editing = None
        v.input.setPlainText(self._draft)
        self._draft = ""
        v.input_area.show_edit(None)
        v._update_buttons()

    def save_edit(self) -> None:
        m, v = self.editing, self.view
        if m is None:
            return
        text = v.input.toPlainText().strip()
        if not text:
            v.banner.show_message("A message cannot be empty: delete it instead.", timeout_ms=5000)
            return
        if m.role == "user":
            v.store.update_message(m.id, content=text, segments=[], status="complete", stats={})
        else:
            stats = dict(m.stats, edited=True)
            v.store.update_message(m.id, content=text, segments=[(text, False)],
                                   status=m.status, stats=stats)
        self.editing = None
        v.input.setPlainText(self._draft)
        self._draft = ""
        v.input_area.show_edit(None)
        v.refresh_transcript()
        msgs = v._messages()
        if m.role == "user" and m.status == "refused" and msgs and msgs[-1].id == m.id:
            v.reply.start(m.id)  # the refused message, shortened: try it now
        v._update_buttons()

    # -- delete, regenerate, send again ------------------------------------------------------
    def delete(self, msg_id: int) -> None:
        v = self.view
        msgs = v._messages()
        ids = [m.id for m in msgs]
        if msg_id not in ids:
            return
        i = ids.index(msg_id)
        doomed = [msg_id]
        if msgs[i].role == "user":  # its reply goes with it
            doomed += [m.id for m in _replies_after(msgs, i)]
        for d in doomed:
            v.store.delete_message(d)
        if self.editing is not None and self.editing.id in doomed:
            self.cancel_edit()
        v.refresh_transcript()
        v._update_buttons()

    def regenerate(self, msg_id: int) -> None:
        v = self.view
        msgs = v._messages()
        ids = [m.id for m in msgs]
        if msg_id not in ids:
            return
        i = ids.index(msg_id)
        for m in msgs[i:]:
            v.store.delete_message(m.id)
        asked = [m for m in msgs[:i] if m.role == "user" and m.status != "refused"]
        v.refresh_transcript()
        if asked and v.send_btn.isEnabled():
            v.reply.start(asked[-1].id)
        v._update_buttons()

    def resend(self, msg_id: int) -> None:
        """A refused message, tried again as it is (as the chat's newest message)."""
        v = self.view
        m = self._find(msg_id)
        if m is None or not v.send_btn.isEnabled():
            return
        v.store.delete_message(m.id)
        assert v.conv_id is not None
        new_id = v.store.add_message(v.conv_id, "user", m.content)
        v.refresh_transcript()
        v.reply.start(new_id)


def _replies_after(msgs: list[Message], i: int) -> list[Message]:
    out = []
    for m in msgs[i + 1:]:
        if m.role != "assistant":
            break
        out.append(m)
    return out
