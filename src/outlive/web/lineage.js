// Which session is whose child (docs/subagents.md), as the owner-session watcher learns it:
// from the list (every session's `parent_id`), from the open session's stream
// (`child_started` names the child first hand) and, for a session the owner stream announces
// (`session_created` does not say), from one GET /v1/sessions/{id}. What was learnt is kept
// across the watcher's fetches, so a fetch that began before a child existed cannot put the
// child back at the rail's top level.

const MEMORY = 4096;
const LOOKUPS_AT_ONCE = 8;

export class Lineage {
  /** @param {function} lookup  id -> the session's JSON (GET /v1/sessions/{id} → session) */
  constructor(lookup) {
    this.lookup = lookup;
    this.parents = new Map(); // session id -> its parent's id (null: a root)
    this.inFlight = 0;
  }

  /** The parent's id, null for a root, undefined when not known. */
  get(id) {
    return this.parents.get(id);
  }

  learn(id, parentId) {
    this.parents.delete(id);
    this.parents.set(id, typeof parentId === "string" ? parentId : null);
    if (this.parents.size > MEMORY) this.parents.delete(this.parents.keys().next().value);
  }

  /**
   * Look the session up: `{parent_id, root_id, agent}` once learnt; "known" when it already
   * was; "busy" when too many lookups are in flight (a list fetch is cheaper then); null when
   * the session is gone or the server unreachable (the next fetch tells).
   */
  async find(id) {
    if (this.parents.has(id)) return "known";
    if (this.inFlight >= LOOKUPS_AT_ONCE) return "busy";
    this.inFlight++;
    let found;
    try {
      found = await this.lookup(id);
    } catch {
      return null;
    } finally {
      this.inFlight--;
    }
    if (!found || found.id !== id) return null;
    const str = (v) => (typeof v === "string" ? v : null);
    this.learn(id, str(found.parent_id));
    return { parent_id: str(found.parent_id), root_id: str(found.root_id),
             agent: str(found.agent) };
  }
}
