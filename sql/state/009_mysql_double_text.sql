-- A double as MariaDB/MySQL print it (CAST(x AS CHAR)): verify fingerprints a MariaDB-sourced
-- table's float columns by this text on both sides. Both databases print the shortest digits that
-- read back to the same double; they lay them out differently (PostgreSQL 1e+20 and 1e-05,
-- MariaDB 1e20 and 0.00001). MariaDB's rule (my_gcvt, strings/dtoa.c): with d the digits and
-- decpt the decimal point's place (value = 0.d × 10^decpt), fixed notation when
-- decpt >= -14 and (decpt <= 15 or the digits reach past the point), else d.ddde<exp>. -0 prints 0.
-- The digits: PostgreSQL's shortest-digits printer (Ryu) does not accept a shorter decimal lying
-- exactly on the rounding interval's edge, which MariaDB's (David Gay's dtoa, round-half-even)
-- does, so a digit fewer is tried while it still reads back as the same double.
CREATE OR REPLACE FUNCTION tideline.mysql_double_text(v double precision) RETURNS text
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
SET extra_float_digits = 1
AS $$
DECLARE
    s text := abs(v)::text;
    digits text;
    decpt int;
    n int;
    out text;
    near numeric;
    far numeric;
    cand text;
    found boolean;
BEGIN
    IF v = 0 THEN
        RETURN '0';
    END IF;
    IF position('e' IN s) > 0 THEN
        digits := replace(split_part(s, 'e', 1), '.', '');
        decpt := split_part(s, 'e', 2)::int + 1;
    ELSIF split_part(s, '.', 1) = '0' THEN
        digits := ltrim(split_part(s, '.', 2), '0');
        decpt := length(digits) - length(split_part(s, '.', 2));
    ELSE
        digits := replace(s, '.', '');
        decpt := length(split_part(s, '.', 1));
    END IF;
    digits := rtrim(digits, '0');
    n := length(digits);
    LOOP
        EXIT WHEN n < 2;
        near := left(digits, n - 1)::numeric;
        far := near + 1;
        IF substr(digits, n, 1) >= '5' THEN
            near := far;
            far := far - 1;
        END IF;
        found := false;
        FOREACH cand IN ARRAY ARRAY[near::text, far::text] LOOP
            CONTINUE WHEN decpt + length(cand) - (n - 1) > 309 OR (decpt + length(cand) - (n - 1) = 309
                AND ('0.' || cand)::numeric > 0.17976931348623157);   -- beyond the largest double
            IF ('0.' || cand || 'e' || (decpt + length(cand) - (n - 1)))::float8 = abs(v) THEN
                decpt := decpt + length(cand) - (n - 1);
                digits := rtrim(cand, '0');
                n := length(digits);
                found := true;
                EXIT;
            END IF;
        END LOOP;
        EXIT WHEN NOT found;
    END LOOP;
    IF decpt >= -14 AND (decpt <= 15 OR n > decpt) THEN
        IF decpt <= 0 THEN
            out := '0.' || repeat('0', -decpt) || digits;
        ELSIF decpt < n THEN
            out := left(digits, decpt) || '.' || substr(digits, decpt + 1);
        ELSE
            out := digits || repeat('0', decpt - n);
        END IF;
    ELSE
        out := left(digits, 1) || CASE WHEN n > 1 THEN '.' || substr(digits, 2) ELSE '' END || 'e' || (decpt - 1);
    END IF;
    RETURN CASE WHEN v < 0 THEN '-' || out ELSE out END;
END
$$;
