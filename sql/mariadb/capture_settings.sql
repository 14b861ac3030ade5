-- What binlog capture needs: row-based binlog with full row images, and how long binlogs stay.
SELECT @@log_bin, @@binlog_format, @@binlog_row_image, @@binlog_expire_logs_seconds, @@gtid_binlog_pos,
       @@server_id;
