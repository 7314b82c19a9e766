// A stick never waits behind a fetch from peers (issue #44): a fetch from slow or lying peers
// may run long under the load lock, while the technician at the node has the bundle in hand.
// A load of a bundle the watcher found takes its turn through here: the fetch under way is
// stopped (its verified blobs kept, as any stopped fetch keeps them), and none starts until
// that load is done.
export class StickTurn {
  private waiting = 0;
  private readonly listeners = new Set<() => void>();

  /** Runs a load of a found bundle: listeners (the fetch from peers) give way first. */
  async take<T>(load: () => Promise<T>): Promise<T> {
    this.waiting++;
    try {
      for (const giveWay of this.listeners) giveWay();
      return await load();
    } finally {
      this.waiting--;
    }
  }

  /** A load of a found bundle waits or runs: no fetch from peers starts now. */
  get pending(): boolean {
    return this.waiting > 0;
  }

  /** `giveWay` is called whenever a load of a found bundle wants its turn. */
  onTake(giveWay: () => void): void {
    this.listeners.add(giveWay);
  }
}
