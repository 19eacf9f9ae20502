-- Fencing tokens that never follow a clock backwards (DESIGN §4.5). The row
-- named '' keeps the highest fence ever issued in this file, kept up by these
-- triggers in the same transaction as every grant; the next fence is above it
-- (and above this host's clock in µs, as before). Insert-strategy releases now
-- keep the row (state 0), so every name's last fence stays as a floor too.
CREATE TRIGGER ${table}_fence_hw_ins AFTER INSERT ON ${table}
WHEN NEW.name <> ''
BEGIN
  UPDATE ${table} SET fence = NEW.fence WHERE name = '' AND fence < NEW.fence;
END;
CREATE TRIGGER ${table}_fence_hw_upd AFTER UPDATE OF fence ON ${table}
WHEN NEW.name <> ''
BEGIN
  UPDATE ${table} SET fence = NEW.fence WHERE name = '' AND fence < NEW.fence;
END;
UPDATE ${table} SET fence = (SELECT MAX(fence) FROM ${table}) WHERE name = '';
