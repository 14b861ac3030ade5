-- Demo source: a small shop. Covers the types Tideline must carry faithfully:
-- numeric money, timestamptz, jsonb, uuid, non-ASCII text, NULLs, arrays, bytea,
-- and a composite primary key (order_items).
CREATE TABLE IF NOT EXISTS customers (
    id           bigserial PRIMARY KEY,
    external_id  uuid        NOT NULL DEFAULT gen_random_uuid(),
    email        text        NOT NULL UNIQUE,
    full_name    text        NOT NULL,
    country      char(2),
    tags         text[],
    profile      jsonb,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE IF NOT EXISTS orders (
    id           bigserial PRIMARY KEY,
    customer_id  bigint        NOT NULL REFERENCES customers (id),
    status       text          NOT NULL CHECK (status IN ('new', 'paid', 'shipped', 'cancelled')),
    total        numeric(12,2) NOT NULL DEFAULT 0,
    currency     char(3)       NOT NULL DEFAULT 'EUR',
    placed_at    timestamptz   NOT NULL DEFAULT now(),
    delivery_on  date,
    note         text,
    updated_at   timestamptz   NOT NULL DEFAULT now()
);

CREATE TABLE IF NOT EXISTS order_items (
    order_id     bigint        NOT NULL REFERENCES orders (id) ON DELETE CASCADE,
    line_no      integer       NOT NULL,
    sku          varchar(32)   NOT NULL,
    quantity     integer       NOT NULL CHECK (quantity > 0),
    unit_price   numeric(10,2) NOT NULL,
    discount     numeric(5,4),
    gift_wrap    boolean       NOT NULL DEFAULT false,
    thumbnail    bytea,
    PRIMARY KEY (order_id, line_no)
);

CREATE INDEX IF NOT EXISTS orders_customer_idx ON orders (customer_id);
CREATE INDEX IF NOT EXISTS orders_updated_idx ON orders (updated_at);

-- Batch mode (no change stream): synced nightly by its update-time cursor.
CREATE TABLE IF NOT EXISTS audit_log (
    id           bigserial   PRIMARY KEY,
    happened_at  timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    actor        text        NOT NULL,
    action       text        NOT NULL,
    payload      jsonb,
    reviewed     boolean     NOT NULL DEFAULT false
);
CREATE INDEX IF NOT EXISTS audit_log_updated_idx ON audit_log (updated_at);
