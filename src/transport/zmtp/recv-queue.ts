// Bounded receive queue behind a socket's async iterator. At the high-water mark it asks the socket
// to stop reading (so TCP pushes back and a libzmq PUB drops at its own HWM, as with libzmq SUB),
// and resumes once the consumer has caught up to half of it.

export class RecvQueue<T> implements AsyncIterableIterator<T> {
  private items: T[] = [];
  private head = 0;
  private waiters: ((r: IteratorResult<T>) => void)[] = [];
  private ended = false;
  private pressured = false;

  constructor(
    private readonly hwm: number,
    private readonly onPressure: (paused: boolean) => void,
  ) {}

  get length(): number {
    return this.items.length - this.head;
  }

  push(item: T): void {
    if (this.ended) return;
    const w = this.waiters.shift();
    if (w) {
      w({ value: item, done: false });
      return;
    }
    this.items.push(item);
    if (!this.pressured && this.length >= this.hwm) {
      this.pressured = true;
      this.onPressure(true);
    }
  }

  next(): Promise<IteratorResult<T>> {
    if (this.head < this.items.length) {
      const value = this.items[this.head]!;
      this.items[this.head++] = undefined as T;
      if (this.head >= 1024 && this.head * 2 >= this.items.length) {
        this.items = this.items.slice(this.head);
        this.head = 0;
      }
      if (this.pressured && this.length <= this.hwm >> 1) {
        this.pressured = false;
        // Resume outside the consumer's call: resuming decodes synchronously and pushes here.
        queueMicrotask(() => this.onPressure(false));
      }
      return Promise.resolve({ value, done: false });
    }
    if (this.ended) return Promise.resolve({ value: undefined, done: true });
    return new Promise((resolve) => this.waiters.push(resolve));
  }

  /** The next item, or undefined when none arrives within `timeoutMs` (or the queue ended). */
  recv(timeoutMs: number, setTimer: (ms: number, fn: () => void) => { cancel(): void }): Promise<T | undefined> {
    if (this.head < this.items.length || this.ended) return this.next().then((r) => (r.done ? undefined : r.value));
    return new Promise((resolve) => {
      const waiter = (r: IteratorResult<T>): void => {
        timer.cancel();
        resolve(r.done ? undefined : r.value);
      };
      const timer = setTimer(timeoutMs, () => {
        const i = this.waiters.indexOf(waiter);
        if (i >= 0) this.waiters.splice(i, 1);
        resolve(undefined);
      });
      this.waiters.push(waiter);
    });
  }

  /** Ends iteration: pending and future next() calls return done once the buffer is empty. */
  end(): void {
    this.ended = true;
    for (const w of this.waiters.splice(0)) w({ value: undefined, done: true });
  }

  return(): Promise<IteratorResult<T>> {
    return Promise.resolve({ value: undefined, done: true });
  }

  [Symbol.asyncIterator](): AsyncIterableIterator<T> {
    return this;
  }
}
