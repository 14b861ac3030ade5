-- The MariaDB demo shop (stack/demo.py loads it into the `shop` database once): customers and
-- orders with the types a MariaDB shop really has — unsigned keys, decimals, enums, a JSON
-- document, DATETIME(6) and TIMESTAMP, utf8mb4 names.
CREATE TABLE IF NOT EXISTS customers (
  id int unsigned NOT NULL AUTO_INCREMENT PRIMARY KEY,
  email varchar(200) NOT NULL,
  full_name varchar(200) NOT NULL,
  country char(2),
  vip boolean NOT NULL DEFAULT 0,
  profile json,
  created_at datetime(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  updated_at timestamp(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE CURRENT_TIMESTAMP(3)
) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;

CREATE TABLE IF NOT EXISTS orders (
  id bigint unsigned NOT NULL AUTO_INCREMENT PRIMARY KEY,
  customer_id int unsigned NOT NULL,
  status enum('new', 'paid', 'shipped', 'cancelled') NOT NULL DEFAULT 'new',
  total decimal(12,2) NOT NULL DEFAULT 0.00,
  note text,
  delivery_on date,
  placed_at datetime(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  KEY (customer_id)
) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;

INSERT INTO customers (email, full_name, country, vip, profile)
SELECT CONCAT('user', seq, '@example.com'),
       CONCAT(ELT(1 + seq % 6, 'Zoë', 'José', 'Łukasz', 'Søren', '李', 'Ольга'), ' ',
              ELT(1 + seq % 5, 'Müller', 'García', 'O''Brien', '王', 'Dvořák')),
       ELT(1 + seq % 6, 'DE', 'ES', 'PL', 'DK', 'CN', NULL), seq % 10 = 0,
       IF(seq % 4 = 0, NULL, JSON_OBJECT('newsletter', seq % 2 = 0, 'note', 'größer ≥ 10 € 🎉'))
  FROM seq_1_to_2000 WHERE NOT EXISTS (SELECT 1 FROM customers);

INSERT INTO orders (customer_id, status, total, note, delivery_on)
SELECT 1 + seq % 2000, ELT(1 + seq % 4, 'new', 'paid', 'shipped', 'cancelled'), (seq % 50000) / 100,
       IF(seq % 3 = 0, 'Bitte klingeln — 2. OG', NULL), DATE_ADD('2026-01-01', INTERVAL seq % 365 DAY)
  FROM seq_1_to_10000 WHERE NOT EXISTS (SELECT 1 FROM orders);
