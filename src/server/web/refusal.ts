// A request the page's routes turn down: the HTTP status, and the message (and field) the
// JSON error body carries.
export class Refusal extends Error {
  readonly status: number;
  readonly field: string | undefined;
  constructor(status: number, message: string, field?: string) {
    super(message);
    this.name = "Refusal";
    this.status = status;
    this.field = field;
  }
}
