// The copy-on-write state the JS reducer folds through, and the value helpers it uses: the
// same split as outlive/domain/transcript_state.py. Kept apart from the event handlers
// (reducer.js) so each file says one thing.

const ID_FIELD = {
  assistant: "message_id", tool: "call_id", approval: "approval_id", client_tool: "call_id",
};

/** Copy-on-write view of a state: each part is copied once, the first time it is written. */
export class Txn {
  constructor(state) {
    this.state = { ...state };
    this.itemsOwned = false;
    this.owned = new Set();
    this.progressOwned = new Set();
    this.listsOwned = new Set();
  }

  get items() {
    return this.state.items;
  }

  find(kind, id) {
    const field = ID_FIELD[kind];
    const items = this.items;
    for (let i = items.length - 1; i >= 0; i--) {
      const item = items[i];
      if (item.kind === kind && item[field] === id) return i;
    }
    return null;
  }

  add(item) {
    const items = this.ownItems();
    items.push(item);
    const i = items.length - 1;
    this.owned.add(i);
    return i;
  }

  /** The item at i, copied first if this transaction has not written it yet. */
  item(i) {
    const items = this.ownItems();
    if (!this.owned.has(i)) {
      items[i] = { ...items[i] };
      this.owned.add(i);
    }
    return items[i];
  }

  progress(i) {
    const item = this.item(i);
    if (!this.progressOwned.has(i)) {
      item.progress = item.progress ? [...item.progress] : [];
      this.progressOwned.add(i);
    }
    return item.progress;
  }

  topList(name) {
    if (!this.listsOwned.has(name)) {
      this.state[name] = [...this.state[name]];
      this.listsOwned.add(name);
    }
    return this.state[name];
  }

  ownItems() {
    if (!this.itemsOwned) {
      this.state.items = [...this.state.items];
      this.itemsOwned = true;
    }
    return this.state.items;
  }
}

// ---- Python's value rules ---------------------------------------------------------------

export function isMapping(value) {
  return value !== null && typeof value === "object" && !Array.isArray(value);
}

/** `data.get(key)`: a missing key is None (null), like a JSON null. */
export function get(data, key) {
  const value = Object.prototype.hasOwnProperty.call(data, key) ? data[key] : undefined;
  return value === undefined ? null : value;
}

export function has(data, key) {
  return Object.prototype.hasOwnProperty.call(data, key);
}

/** Python truthiness of a JSON value. */
export function truthy(value) {
  if (value === null || value === undefined || value === false) return false;
  if (value === 0 || value === "") return false;
  if (Array.isArray(value)) return value.length > 0;
  if (isMapping(value)) return Object.keys(value).length > 0;
  return true;
}

/** Own deep copy of an event payload (the Python reducer's `_json`). */
export function json(value) {
  if (Array.isArray(value)) return value.map(json);
  if (isMapping(value)) {
    const out = {};
    for (const [k, v] of Object.entries(value)) out[k] = json(v);
    return out;
  }
  return value === undefined ? null : value;
}

function pyQuote(s) {
  const quote = s.includes("'") && !s.includes('"') ? '"' : "'";
  let out = quote;
  for (const ch of s) {
    const code = ch.codePointAt(0);
    if (ch === "\\") out += "\\\\";
    else if (ch === quote) out += "\\" + quote;
    else if (ch === "\n") out += "\\n";
    else if (ch === "\r") out += "\\r";
    else if (ch === "\t") out += "\\t";
    else if (code < 0x20 || code === 0x7f) out += "\\x" + code.toString(16).padStart(2, "0");
    else out += ch;
  }
  return out + quote;
}

function pyRepr(value) {
  if (value === null || value === undefined) return "None";
  if (value === true) return "True";
  if (value === false) return "False";
  if (typeof value === "number") return String(value);
  if (typeof value === "string") return pyQuote(value);
  if (Array.isArray(value)) return "[" + value.map(pyRepr).join(", ") + "]";
  return (
    "{" +
    Object.entries(value)
      .map(([k, v]) => pyQuote(k) + ": " + pyRepr(v))
      .join(", ") +
    "}"
  );
}

/** Python's str() of a JSON value. */
export function pyStr(value) {
  return typeof value === "string" ? value : pyRepr(value);
}

/** `_text`: str stays, None is "", anything else is str(value). */
export function text(value) {
  if (typeof value === "string") return value;
  return value === null || value === undefined ? "" : pyStr(value);
}

/** `_ident`: ids stay str/int/None (bool is an int in Python); anything else becomes str. */
export function ident(value) {
  if (value === null || value === undefined) return null;
  if (typeof value === "string" || typeof value === "boolean") return value;
  if (typeof value === "number" && Number.isInteger(value)) return value;
  return pyStr(value);
}

/** `_int`: an int that is not a bool, else null. */
export function int(value) {
  return typeof value === "number" && Number.isInteger(value) ? value : null;
}
