"""Realistic cell values for each attribute kind, drawn from a seeded `random.Random`.

Categorical values follow a skewed (Zipf-like) distribution so that counts, GROUP BY and
"the most common" questions have real answers instead of ties.
"""

from __future__ import annotations

import random

from acesql.data.synth.domain import Attr

FIRST = (
    "Ana Ben Carla Dmitri Elena Farid Grace Hiro Ines Jamal Kira Liam Maya Nikolai Olga "
    "Pedro Quinn Rosa Samir Tara Umar Vera Wen Ximena Yusuf Zoe Aiko Bruno Chloe Diego "
    "Esther Felix Greta Hassan Ivy Jonas Keiko Lucas Mei Noah Omar Priya Rafael Sofia Tomas "
    "Uma Victor Wanda Xavier Yara Zane Amara Boris Camila Dev Eitan Fatima Gabriel Hana "
    "Igor"
).split()
LAST = (
    "Smith Garcia Okafor Tanaka Novak Silva Khan Meyer Rossi Dubois Kowalski Nguyen Haddad "
    "Johansson Petrov Moreau Ivanova Costa Schmidt Yilmaz Ortiz Murphy Chen Kim Patel Ali "
    "Fischer Lopez Andersen Bianchi Horvat Sato Mensah Reyes Walsh Dimitrov Kaur Larsen "
    "Morales Nakamura Oliveira Park Quispe Rahman Santos Torres Varga Weber Young Zimmerman"
).split()
CITIES = (
    "Lisbon|Osaka|Lagos|Denver|Turin|Pune|Austin|Lyon|Krakow|Seville|Nairobi|Busan|Porto|"
    "Leeds|Quito|Tbilisi|Hamburg|Valencia|Cork|Adelaide|Montreal|Bergen|Cusco|Accra|Hanoi|"
    "Izmir|Graz|Malmo|Bologna|Tucson|Halifax|Curitiba|Da Nang|San Diego|Kyoto|Salzburg|"
    "Rotterdam|Gdansk"
).split("|")
COUNTRIES = (
    "Portugal|Japan|Nigeria|United States|Italy|India|France|Poland|Spain|Kenya|South Korea|"
    "United Kingdom|Ecuador|Georgia|Germany|Ireland|Australia|Canada|Norway|Peru|Ghana|"
    "Vietnam|Turkey|Austria|Sweden|Brazil|Netherlands|Mexico|Chile|Egypt"
).split("|")
STREETS = (
    "Oak Maple Cedar Harbor Mill Station Church River Park Hill Lake Elm Pine Bridge"
).split()
STREET_TYPES = ["Street", "Avenue", "Road", "Lane", "Way", "Boulevard"]
COMPANY_A = (
    "North Blue Silver Summit Pioneer Atlas Union Crescent Granite Meridian Harbor "
    "Evergreen Apex Beacon Cobalt Delta Falcon Horizon Keystone Lakeside Orion Prairie "
    "Redwood Sterling"
).split()
COMPANY_B = (
    "Trading Holdings Systems Partners Group Works Logistics Labs Industries Supply Capital "
    "Foods Networks Health Energy Media"
).split()
COMPANY_SUFFIX = ["Inc", "Ltd", "LLC", "Co", "GmbH", "SA", ""]


def zipf_weights(n: int, s: float = 0.9) -> list[float]:
    return [1.0 / (i + 1) ** s for i in range(n)]


class ValueMaker:
    """Makes the values of one column; unique kinds (codes, titles) avoid repeats."""

    def __init__(self, attr: Attr, rng: random.Random):
        self.attr, self.rng = attr, rng
        self.seen: set = set()
        if attr.values:
            order = list(attr.values)
            rng.shuffle(order)  # which value is most common differs per database
            self.choices, self.weights = order, zipf_weights(len(order))

    def make(self):
        attr, rng = self.attr, self.rng
        if attr.null_rate and rng.random() < attr.null_rate:
            return None
        value = getattr(self, "_" + attr.kind)()
        if attr.codes and value in attr.codes:
            value = attr.codes[value]
        return value

    # ----------------------------------------------------------------- kinds
    def _person_name(self):
        return f"{self.rng.choice(FIRST)} {self.rng.choice(LAST)}"

    def _first_name(self):
        return self.rng.choice(FIRST)

    def _last_name(self):
        return self.rng.choice(LAST)

    def _company(self):
        suffix = self.rng.choice(COMPANY_SUFFIX)
        name = f"{self.rng.choice(COMPANY_A)} {self.rng.choice(COMPANY_B)}"
        return f"{name} {suffix}".strip()

    def _city(self):
        return self.rng.choices(CITIES, zipf_weights(len(CITIES), 0.6))[0]

    def _country(self):
        return self.rng.choices(COUNTRIES, zipf_weights(len(COUNTRIES), 0.6))[0]

    def _street(self):
        rng = self.rng
        return f"{rng.randint(1, 250)} {rng.choice(STREETS)} {rng.choice(STREET_TYPES)}"

    def _email(self):
        rng = self.rng
        user = f"{rng.choice(FIRST).lower()}.{rng.choice(LAST).lower()}{rng.randint(1, 99)}"
        return f"{user}@{rng.choice(['mail.com', 'post.net', 'inbox.org', 'example.com'])}"

    def _phone(self):
        rng = self.rng
        return f"+{rng.randint(1, 99)} {rng.randint(100, 999)} {rng.randint(1000, 9999)}"

    def _code(self):
        prefix = self.rng.choice(self.attr.values) if self.attr.values else "X"
        return self._unique(lambda: f"{prefix}-{self.rng.randint(1000, 99999)}")

    def _text(self):
        words = self.attr.values or ("note",)
        n = self.rng.randint(2, 5)
        return " ".join(self.rng.choice(words) for _ in range(n)).capitalize()

    def _choice(self):
        return self.rng.choices(self.choices, self.weights)[0]

    def _title(self):
        parts = self.attr.values
        heads = [p for p in parts if not p.startswith("-")] or ["Item"]

        def one():
            head = self.rng.choice(heads)
            tail = self.rng.choice(
                [p for p in parts if p != head] or [str(self.rng.randint(2, 99))]
            )
            # "-cillin" glues onto the head as a suffix; a plain word follows with a space
            return head + tail[1:] if tail.startswith("-") else f"{head} {tail}"

        return self._unique(one, fallback=lambda v: f"{v} {self.rng.randint(2, 9)}")

    def _date(self):
        lo, hi = self.attr.range
        rng = self.rng
        return (
            f"{rng.randint(int(lo), int(hi)):04d}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
        )

    def _datetime(self):
        rng = self.rng
        return f"{self._date()} {rng.randint(6, 21):02d}:{rng.choice([0, 15, 30, 45]):02d}:00"

    def _year(self):
        return self.rng.randint(int(self.attr.range[0]), int(self.attr.range[1]))

    def _int(self):
        return self._year()

    def _rating(self):
        return self._year()

    def _float(self):
        lo, hi = self.attr.range
        return round(self.rng.uniform(float(lo), float(hi)), 1 if hi - lo > 20 else 2)

    def _money(self):
        lo, hi = (float(x) for x in self.attr.range)
        # log-uniform: prices and salaries are skewed, not flat
        if lo > 0:
            value = lo * (hi / lo) ** self.rng.random()
        else:
            value = self.rng.uniform(lo, hi)
        return round(value, 2)

    def _bool(self):
        return int(self.rng.random() < 0.35)

    def _unique(self, make, fallback=None, tries: int = 20):
        for _ in range(tries):
            value = make()
            if value not in self.seen:
                self.seen.add(value)
                return value
        value = fallback(value) if fallback else value
        self.seen.add(value)
        return value
