! eckpt for Fortran: bind(C) interfaces to libeckpt (include/eckpt.h) and its constants.
!
!   use eckpt
!   real(c_double), allocatable, target :: grid(:, :)
!   integer(c_int64_t), target :: step
!   rc = eckpt_init()                                  ! ECKPT_DIR, ECKPT_RANK from the environment
!   rc = eckpt_protect(0, grid)                        ! a whole array (or scalar) of any rank
!   rc = eckpt_protect(1, step)
!   rc = eckpt_protect_file("out.log" // c_null_char, ECKPT_FILE_APPEND)
!   if (eckpt_restart() > 0) ...                       ! grid and step filled in place
!   rc = eckpt_checkpoint()
!   if (rc < 0) print *, eckpt_error_message(rc)
!   rc = eckpt_finalize()
!
! Compile this file with the program (gfortran include/eckpt.f90 prog.f90 -leckpt). Strings
! passed to the library must end with c_null_char. Memory must be `target` and must not move
! while protected (no reallocation until eckpt_finalize). Page-aligned memory is tracked by
! the kernel; an ordinary allocatable array usually is not page aligned and is tracked by
! hashing its blocks instead, which is correct but reads the whole array at each checkpoint.
!
! eckpt_protect(id, x) protects a whole array or scalar of any rank, of kind real(c_float),
! real(c_double), integer(c_int), integer(c_int64_t), complex(c_float_complex),
! complex(c_double_complex) or logical(c_bool); the module computes its length. It refuses,
! with ECKPT_EINVAL and the reason in eckpt_error_message, what restart could not fill in
! place: an array that is not contiguous (a section such as a(1::2) or m(1,:), given directly
! or through an assumed-shape dummy) and an assumed-size dummy b(*) (its size is unknown).
! Protect the whole array where it is declared. One case it cannot see: a section given to an
! explicit-shape dummy b(n) (or a `contiguous` one) is copied into a temporary that is freed on
! return, and the dummy looks like an ordinary array: protect such a dummy only if no caller
! gives it a section (gfortran -Warray-temporaries reports where the copies are made).
!
! eckpt_protect(id, ptr, len), the C form, is for anything else (other kinds, derived types):
! ptr (c_loc) must point at contiguous storage that outlives the protect, never at an
! explicit-shape dummy given a section, and len is in bytes (8 * size(x) for real(c_double)).
module eckpt
  use, intrinsic :: iso_c_binding, only: c_int, c_char, c_ptr, c_size_t, c_null_char, c_null_ptr, c_associated, &
                                         c_f_pointer, c_loc, c_float, c_double, c_int64_t, c_float_complex, &
                                         c_double_complex, c_bool
  implicit none
  private

  ! eckpt_protect_file modes.
  integer(c_int), parameter, public :: ECKPT_FILE_APPEND = 1
  integer(c_int), parameter, public :: ECKPT_FILE_SNAPSHOT = 2
  integer(c_int), parameter, public :: ECKPT_FILE_INPUT = 3

  ! Return codes (eckpt_strerror describes them).
  integer(c_int), parameter, public :: ECKPT_OK = 0
  integer(c_int), parameter, public :: ECKPT_EINVAL = -1
  integer(c_int), parameter, public :: ECKPT_ESTATE = -2
  integer(c_int), parameter, public :: ECKPT_EIO = -3
  integer(c_int), parameter, public :: ECKPT_ECORRUPT = -4
  integer(c_int), parameter, public :: ECKPT_EMISMATCH = -5
  integer(c_int), parameter, public :: ECKPT_ECAPTURE = -6
  integer(c_int), parameter, public :: ECKPT_EINTERNAL = -7
  integer(c_int), parameter, public :: ECKPT_ECLUSTER = -8
  integer(c_int), parameter, public :: ECKPT_EFENCED = -9
  integer(c_int), parameter, public :: ECKPT_EDEVICE = -10

  public :: eckpt_init, eckpt_protect, eckpt_protect_device, eckpt_protect_file, eckpt_protect_dir, eckpt_checkpoint, &
            eckpt_snapshot, eckpt_restart, eckpt_wait, eckpt_finalize, eckpt_strerror, eckpt_last_error, eckpt_error_message

  ! eckpt_protect(id, x) for a whole array or scalar x, eckpt_protect(id, ptr, len) for len bytes
  ! at ptr (see the top of this file).
  interface eckpt_protect
    function eckpt_protect_bytes(id, ptr, len) bind(C, name="eckpt_protect") result(rc)
      import :: c_int, c_ptr, c_size_t
      integer(c_int), value :: id
      type(c_ptr), value :: ptr
      integer(c_size_t), value :: len
      integer(c_int) :: rc
    end function eckpt_protect_bytes
    module procedure protect_c_float, protect_c_double, protect_c_int, protect_c_int64_t, protect_c_float_complex, &
                     protect_c_double_complex, protect_c_bool
  end interface eckpt_protect

  interface
    ! `config` is optional: absent passes NULL (configuration from the environment), else a
    ! null-terminated "key=value;..." string.
    function eckpt_init(config) bind(C, name="eckpt_init") result(rc)
      import :: c_int, c_char
      character(kind=c_char), dimension(*), intent(in), optional :: config
      integer(c_int) :: rc
    end function eckpt_init

    ! What the typed eckpt_protect calls: elem_size * count bytes at ptr, or ECKPT_EINVAL with a
    ! message for an array that is not contiguous.
    function eckpt_protect_array(id, ptr, elem_size, count, contiguous) bind(C, name="eckpt_protect_array") result(rc)
      import :: c_int, c_ptr, c_size_t
      integer(c_int), value :: id
      type(c_ptr), value :: ptr
      integer(c_size_t), value :: elem_size, count
      integer(c_int), value :: contiguous
      integer(c_int) :: rc
    end function eckpt_protect_array

    ! GPU memory: `devptr` is a CUDA device pointer (c_devloc of a CUDA Fortran `device` array,
    ! or what cudaMalloc returned).
    function eckpt_protect_device(id, devptr, len) bind(C, name="eckpt_protect_device") result(rc)
      import :: c_int, c_ptr, c_size_t
      integer(c_int), value :: id
      type(c_ptr), value :: devptr
      integer(c_size_t), value :: len
      integer(c_int) :: rc
    end function eckpt_protect_device

    function eckpt_protect_file(path, mode) bind(C, name="eckpt_protect_file") result(rc)
      import :: c_int, c_char
      character(kind=c_char), dimension(*), intent(in) :: path
      integer(c_int), value :: mode
      integer(c_int) :: rc
    end function eckpt_protect_file

    function eckpt_protect_dir(path) bind(C, name="eckpt_protect_dir") result(rc)
      import :: c_int, c_char
      character(kind=c_char), dimension(*), intent(in) :: path
      integer(c_int) :: rc
    end function eckpt_protect_dir

    function eckpt_checkpoint() bind(C, name="eckpt_checkpoint") result(rc)
      import :: c_int
      integer(c_int) :: rc
    end function eckpt_checkpoint

    ! Once per step: checkpoints when the interval has elapsed (the epoch), else 0.
    function eckpt_snapshot() bind(C, name="eckpt_snapshot") result(rc)
      import :: c_int
      integer(c_int) :: rc
    end function eckpt_snapshot

    function eckpt_restart() bind(C, name="eckpt_restart") result(rc)
      import :: c_int
      integer(c_int) :: rc
    end function eckpt_restart

    ! Cluster mode: waits until the last checkpoint is committed across the nodes.
    function eckpt_wait() bind(C, name="eckpt_wait") result(rc)
      import :: c_int
      integer(c_int) :: rc
    end function eckpt_wait

    function eckpt_finalize() bind(C, name="eckpt_finalize") result(rc)
      import :: c_int
      integer(c_int) :: rc
    end function eckpt_finalize

    ! Returns a C string (const char *): see eckpt_error_message for a Fortran one.
    function eckpt_strerror(code) bind(C, name="eckpt_strerror") result(text)
      import :: c_int, c_ptr
      integer(c_int), value :: code
      type(c_ptr) :: text
    end function eckpt_strerror

    function eckpt_last_error() bind(C, name="eckpt_last_error") result(text)
      import :: c_ptr
      type(c_ptr) :: text
    end function eckpt_last_error
  end interface

contains

  ! The typed eckpt_protect, one per kind: each passes its element size to protect_whole. `x`
  ! is assumed-rank without the `contiguous` attribute, so that it is the caller's array itself
  ! (a section stays a strided view, never a copy), `target` so that c_loc of it is that
  ! array's, and intent(inout) so that a constant or an expression (a temporary) does not
  ! compile: restart writes into it.
  function protect_c_float(id, x) result(rc)
    integer(c_int), intent(in) :: id
    real(c_float), dimension(..), intent(inout), target :: x
    integer(c_int) :: rc
    rc = protect_whole(id, x, storage_size(x, c_size_t))
  end function protect_c_float

  function protect_c_double(id, x) result(rc)
    integer(c_int), intent(in) :: id
    real(c_double), dimension(..), intent(inout), target :: x
    integer(c_int) :: rc
    rc = protect_whole(id, x, storage_size(x, c_size_t))
  end function protect_c_double

  function protect_c_int(id, x) result(rc)
    integer(c_int), intent(in) :: id
    integer(c_int), dimension(..), intent(inout), target :: x
    integer(c_int) :: rc
    rc = protect_whole(id, x, storage_size(x, c_size_t))
  end function protect_c_int

  function protect_c_int64_t(id, x) result(rc)
    integer(c_int), intent(in) :: id
    integer(c_int64_t), dimension(..), intent(inout), target :: x
    integer(c_int) :: rc
    rc = protect_whole(id, x, storage_size(x, c_size_t))
  end function protect_c_int64_t

  function protect_c_float_complex(id, x) result(rc)
    integer(c_int), intent(in) :: id
    complex(c_float_complex), dimension(..), intent(inout), target :: x
    integer(c_int) :: rc
    rc = protect_whole(id, x, storage_size(x, c_size_t))
  end function protect_c_float_complex

  function protect_c_double_complex(id, x) result(rc)
    integer(c_int), intent(in) :: id
    complex(c_double_complex), dimension(..), intent(inout), target :: x
    integer(c_int) :: rc
    rc = protect_whole(id, x, storage_size(x, c_size_t))
  end function protect_c_double_complex

  function protect_c_bool(id, x) result(rc)
    integer(c_int), intent(in) :: id
    logical(c_bool), dimension(..), intent(inout), target :: x
    integer(c_int) :: rc
    rc = protect_whole(id, x, storage_size(x, c_size_t))
  end function protect_c_bool

  ! Describes x (elements of `bits` bits) to the library, which protects its bytes or refuses
  ! it with the reason: not contiguous (a section), or of unknown size (an assumed-size array,
  ! whose size gfortran gives as -1).
  function protect_whole(id, x, bits) result(rc)
    integer(c_int), intent(in) :: id
    type(*), dimension(..), intent(inout), target :: x
    integer(c_size_t), intent(in) :: bits
    integer(c_int) :: rc
    type(c_ptr) :: ptr
    ! c_loc is defined only for a contiguous array of nonzero size; the library refuses the
    ! others before it looks at the pointer.
    ptr = c_null_ptr
    if (is_contiguous(x) .and. size(x) > 0) ptr = c_loc(x)
    rc = eckpt_protect_array(id, ptr, bits / 8, size(x, kind=c_size_t), merge(1_c_int, 0_c_int, is_contiguous(x)))
  end function protect_whole

  ! "<what the code means>: <the library's full message of the last failure>", as a Fortran
  ! string, for error reports.
  function eckpt_error_message(code) result(message)
    integer(c_int), intent(in) :: code
    character(len=:), allocatable :: message
    message = from_c(eckpt_strerror(code)) // ": " // from_c(eckpt_last_error())
  end function eckpt_error_message

  ! Copies a NUL-terminated C string into a Fortran string.
  function from_c(text) result(s)
    type(c_ptr), intent(in) :: text
    character(len=:), allocatable :: s
    character(kind=c_char), pointer :: chars(:)
    integer :: n, i
    ! Longer than any message eckpt writes; the loop stops at the terminating NUL.
    integer, parameter :: max_len = 65536
    if (.not. c_associated(text)) then
      s = ""
      return
    end if
    call c_f_pointer(text, chars, [max_len])
    n = 0
    do while (n < max_len)
      if (chars(n + 1) == c_null_char) exit
      n = n + 1
    end do
    allocate(character(len=n) :: s)
    do i = 1, n
      s(i:i) = chars(i)
    end do
  end function from_c

end module eckpt
