"""A small inventory tracker: load items from CSV, adjust stock, report what to reorder."""

import csv
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path


@dataclass
class Item:
    sku: str
    name: str
    quantity: int
    reorder_level: int
    unit_price: float
    tags: list = field(default_factory=list)

    def value(self):
        return self.quantity * self.unit_price

    def needs_reorder(self):
        return self.quantity <= self.reorder_level


class Inventory:
    def __init__(self):
        self.items = {}
        self.history = []

    def add(self, item):
        if item.sku in self.items:
            raise ValueError(f"duplicate sku {item.sku}")
        self.items[item.sku] = item
        self.history.append((date.today(), "add", item.sku, item.quantity))

    def remove(self, sku):
        item = self.items.pop(sku)
        self.history.append((date.today(), "remove", sku, item.quantity))
        return item

    def receive(self, sku, amount):
        if amount <= 0:
            raise ValueError("amount must be positive")
        item = self.items[sku]
        item.quantity += amount
        self.history.append((date.today(), "receive", sku, amount))

    def ship(self, sku, amount):
        item = self.items[sku]
        if amount > item.quantity:
            raise ValueError(f"only {item.quantity} of {sku} in stock")
        item.quantity -= amount
        self.history.append((date.today(), "ship", sku, amount))

    def total_value(self):
        return sum(item.value() for item in self.items.values())

    def to_reorder(self):
        return sorted(
            (item for item in self.items.values() if item.needs_reorder()),
            key=lambda item: item.quantity - item.reorder_level,
        )

    def by_tag(self, tag):
        return [item for item in self.items.values() if tag in item.tags]

    def search(self, text):
        text = text.lower()
        return [
            item
            for item in self.items.values()
            if text in item.name.lower() or text in item.sku.lower()
        ]


def load_csv(path):
    inventory = Inventory()
    with open(path, newline="") as handle:
        for row in csv.DictReader(handle):
            tags = [t.strip() for t in row.get("tags", "").split(";") if t.strip()]
            inventory.add(
                Item(
                    sku=row["sku"],
                    name=row["name"],
                    quantity=int(row["quantity"]),
                    reorder_level=int(row["reorder_level"]),
                    unit_price=float(row["unit_price"]),
                    tags=tags,
                )
            )
    return inventory


def save_csv(inventory, path):
    fields = ["sku", "name", "quantity", "reorder_level", "unit_price", "tags"]
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields)
        writer.writeheader()
        for item in inventory.items.values():
            writer.writerow(
                {
                    "sku": item.sku,
                    "name": item.name,
                    "quantity": item.quantity,
                    "reorder_level": item.reorder_level,
                    "unit_price": f"{item.unit_price:.2f}",
                    "tags": ";".join(item.tags),
                }
            )


def report(inventory):
    lines = ["Inventory report", "================", ""]
    lines.append(f"Items: {len(inventory.items)}")
    lines.append(f"Total value: {inventory.total_value():.2f}")
    lines.append("")
    lines.append("To reorder:")
    for item in inventory.to_reorder():
        lines.append(f"  {item.sku:<10} {item.name:<24} {item.quantity:>5} / {item.reorder_level}")
    return "\n".join(lines)


def main(argv):
    if len(argv) != 2:
        print("usage: inventory.py FILE.csv")
        return 2
    inventory = load_csv(Path(argv[1]))
    print(report(inventory))
    return 0


if __name__ == "__main__":
    import sys

    raise SystemExit(main(sys.argv))
